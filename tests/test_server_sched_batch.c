// test_server_sched_batch — how jobs share the engine: concurrent generations (batched)
// equal the same generations run one at a time; a seed repeats; stop strings cut the text;
// the engine's limits; a full queue says busy; a pool too small for the batch preempts and
// recomputes jobs without changing what they generate; a model with padding rows past the
// vocabulary never proposes them. Without a model: the generated text's stop strings and
// held-back bytes (gentext.h), the batch planner's budgets (sched_plan.h).
// test_server_sched_answers has what one job answers against the model run directly.
//
// The model, the tokenizer and the tolerances: sched_test.h (generated ids identical).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/gpt2.h"
#include "model/logits.h"
#include "sched_test.h"
#include "server/engine/gentext.h"
#include "server/engine/sched.h"
#include "server/engine/sched_plan.h"
#include "server/engine/sched_seq.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"

// Six generations of max_tokens (greedy and sampled with seed + i in turn), each run alone,
// then all six submitted at once: 1 when every batched run's ids equal its run alone, all
// max_tokens of them; each batched run is CHECKed to end at its length. *before: the gauges
// between the runs alone and the batch.
static int batched_equal_alone(Sched *s, const Tokenizer *tok, size_t max_tokens, uint64_t seed,
                               SchedGauges *before) {
    const char *texts[6] = {"오늘 날씨가", "한국어 모델은", "여러분 2019년 수고하셨습니다.",
                            "서울",        "이 영화 정말",  "옛날 옛적에 호랑이가"};
    int *ids[6];
    size_t n[6];
    char err[KG_ERRLEN];
    for (int i = 0; i < 6; i++)
        REQUIRE(!tok_encode(tok, texts[i], strlen(texts[i]), &ids[i], &n[i], err), "%s", err);
    SchedParams p[6];
    Result alone[6], together[6];
    for (int i = 0; i < 6; i++) {
        p[i] = gen_params(ids[i], n[i], max_tokens, i % 2 ? 0.8f : 0.0f, seed + (uint64_t)i);
        run_job(s, &p[i], &alone[i]);
    }
    sched_gauges(s, before);
    SchedSeq *jobs[6];
    for (int i = 0; i < 6; i++)
        jobs[i] = submit(s, &p[i]);
    int same = 1;
    for (int i = 0; i < 6; i++) {
        wait_done(jobs[i], &g_w, &together[i]);
        same &= together[i].n == alone[i].n && alone[i].n == max_tokens;
        for (size_t k = 0; same && k < alone[i].n; k++)
            same &= together[i].ids[k] == alone[i].ids[k];
        CHECK(together[i].state == SCHED_DONE_LENGTH &&
              together[i].stats.generated_tokens == max_tokens);
        sched_seq_release(jobs[i]);
    }
    for (int i = 0; i < 6; i++)
        free(ids[i]);
    return same;
}

static void test_batched_equals_alone(Sched *s, const Tokenizer *tok) {
    SchedGauges before;
    int same = batched_equal_alone(s, tok, 12, 1234, &before);
    printf("6 generations batched vs one at a time (greedy and seeded): ids %s\n",
           same ? "identical" : "DIFFER");
    CHECK(same);
}

static void test_text_and_stop(Sched *s, const Tokenizer *tok) {
    int *ids;
    size_t n;
    char err[KG_ERRLEN];
    REQUIRE(!tok_encode(tok, "옛날 옛적에", 16, &ids, &n, err), "%s", err);
    Result r;
    // hot: the random model's text then varies enough to hold a stop string past its start
    SchedParams p = gen_params(ids, n, 40, 3.0f, 7);
    run_job(s, &p, &r);
    // the streamed pieces concatenate to the decode of the generated ids
    const char *text = r.text;
    const int *gen = r.ids;
    size_t ng = r.n;
    int *all = malloc((n + ng) * sizeof *all);
    memcpy(all, ids, n * sizeof *all);
    memcpy(all + n, gen, ng * sizeof *all);
    char *full, *prompt;
    REQUIRE(!tok_decode(tok, all, n + ng, &full, NULL, err), "%s", err);
    REQUIRE(!tok_decode(tok, ids, n, &prompt, NULL, err), "%s", err);
    CHECK_MSG(!strcmp(full + strlen(prompt), text), "stream '%s' vs decode '%s'", text,
              full + strlen(prompt));
    // the same seed again: the same text
    Result r2;
    run_job(s, &p, &r2);
    int same = r2.n == r.n;
    for (size_t i = 0; same && i < r.n; i++)
        same &= r2.ids[i] == r.ids[i];
    CHECK(same);
    // stop at a string that occurs in the text: it ends right before it
    // a 3-byte stop string whose first occurrence is past the start, at a character boundary
    char stop[8] = "";
    for (size_t off = strlen(text) / 2; off > 0 && !stop[0]; off--) {
        if ((text[off] & 0xC0) == 0x80 || strlen(text + off) < 3) continue;
        memcpy(stop, text + off, 3);
        stop[3] = '\0';
        if (strstr(text, stop) == text) stop[0] = '\0';
    }
    CHECK_MSG(stop[0], "no usable stop string in '%s'", text);
    if (stop[0]) {
        const char *stops[1] = {stop};
        p.stop = stops;
        p.n_stop = 1;
        Result r3;
        run_job(s, &p, &r3);
        const char *cut = r3.text;
        const char *first = strstr(text, stop);
        CHECK_MSG(r3.state == SCHED_DONE_STOP && strlen(cut) == (size_t)(first - text) &&
                      !strncmp(cut, text, strlen(cut)),
                  "stop '%s': got '%s'", stop, cut);
        printf("stop string at byte %zu: %s\n", (size_t)(first - text),
               r3.state == SCHED_DONE_STOP ? "stopped there" : "MISSED");
    }
    free(all);
    free(full);
    free(prompt);
    free(ids);
}

static void test_limits(Sched *s, size_t n_ctx) {
    char err[KG_ERRLEN];
    SchedSeq *j = NULL;
    int big[600];
    for (int i = 0; i < 600; i++)
        big[i] = i + 10;
    SchedParams p = next_params(big, n_ctx + 1 <= 600 ? n_ctx + 1 : 600);
    CHECK(sched_submit(s, &p, on_notify, &g_w, &j, err) == KG_ERANGE && !j);
    CHECK(strstr(err, "n_ctx") != NULL);
    int bad[2] = {5, (int)TOK_V};
    p = next_params(bad, 2);
    CHECK(sched_submit(s, &p, on_notify, &g_w, &j, err) == KG_ERANGE);
    p = next_params(bad, 0);
    CHECK(sched_submit(s, &p, on_notify, &g_w, &j, err) == KG_EINVAL);
    // a long generation, cancelled while it runs (two steps seen past its submission; a 20 ms
    // sleep guessed it, and a sanitized build may not have started it by then): it ends as
    // cancelled, well before max_tokens
    p = gen_params(big, 8, 400, 1.0f, 1);
    SchedGauges g;
    sched_gauges(s, &g);
    uint64_t steps0 = g.steps;
    j = submit(s, &p);
    WAIT_UNTIL((sched_gauges(s, &g), g.steps >= steps0 + 2));
    CHECK_MSG(g.steps >= steps0 + 2, "the generation ran 2 steps in 60 s: %llu",
              (unsigned long long)(g.steps - steps0));
    sched_seq_cancel(j);
    Result r;
    wait_done(j, &g_w, &r);
    CHECK(r.state == SCHED_DONE_CANCELLED && r.n < 400);
    sched_seq_release(j);
    printf("cancelled after %zu tokens\n", r.n);
}

static void test_queue_full(const Gpt2 *m, const Tokenizer *tok) {
    SchedOptions o = {.max_batch = 1,
                      .max_queue = 2,
                      .kv_blocks = kv_blocks_for(m->config.n_ctx) + 1,
                      .max_prompt = 64,
                      .step_tokens = 64};
    Sched *s;
    char err[KG_ERRLEN];
    REQUIRE(!sched_start(&s, m, tok, &o, err), "%s", err);
    int ids[4] = {10, 11, 12, 13};
    SchedParams p = gen_params(ids, 4, 200, 0.0f, 1);
    SchedSeq *jobs[8];
    int busy = 0, ok = 0;
    for (int i = 0; i < 8; i++) {
        int rc = sched_submit(s, &p, on_notify, &g_w, &jobs[ok], err);
        if (rc == KG_EBUSY)
            busy++;
        else if (rc == KG_OK)
            ok++;
    }
    printf("one batch slot and a queue of 2: %d accepted, %d busy\n", ok, busy);
    CHECK(ok == 3 && busy == 5); // one batch slot and two queue places
    for (int i = 0; i < ok; i++)
        sched_seq_release(jobs[i]); // released: cancelled
    sched_free(s);
}

// A pool of one context and a block (17 blocks of 16 positions at n_ctx 256) under six
// generations of 100 tokens (7 blocks each): admission waits for blocks, and running jobs are
// preempted and recomputed; every generation still equals the same one run alone, id for id.
static void test_preemption(const Gpt2 *m, const Tokenizer *tok) {
    SchedOptions o = {.max_batch = 6,
                      .max_queue = 8,
                      .kv_blocks = kv_blocks_for(m->config.n_ctx) + 1,
                      .cache_blocks = 4,
                      .max_prompt = 64,
                      .step_tokens = 32};
    Sched *s;
    char err[KG_ERRLEN];
    REQUIRE(!sched_start(&s, m, tok, &o, err), "%s", err);
    SchedGauges g0, g1;
    int same = batched_equal_alone(s, tok, 100, 99, &g0);
    // the engine publishes the pool's figures after the step that dropped the last job
    WAIT_UNTIL((sched_gauges(s, &g1), !g1.kv.used));
    uint64_t preempted = g1.preemptions_total - g0.preemptions_total;
    printf("6 x 100 tokens in 17 blocks: %llu preemptions, ids %s the runs alone\n",
           (unsigned long long)preempted, same ? "equal to" : "DIFFER from");
    CHECK(same && preempted > 0 && g1.kv.used == 0);
    sched_free(s);
}

// A model with rows past the tokenizer's vocabulary (64 padding rows): those ids are never
// proposed, so every candidate and every generated token can be spelled.
static void test_padded_vocab(const Tokenizer *tok) {
    char err[KG_ERRLEN], dir[] = "/tmp/kg-sched-pad-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    TestModelSpec spec = {.L = 1,
                          .C = 64,
                          .NH = 4,
                          .T = 64,
                          .V = TOK_V + 64,
                          .dtype = KG_F32,
                          .wte_std = 0.5f,
                          .seed = 5};
    REQUIRE(!testmodel_write(dir, &spec, err), "%s", err);
    // make the padding rows the most likely tokens, so that proposing one cannot go unseen
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    SafeTensors st;
    REQUIRE(!safetensors_open(&st, path, err), "%s", err);
    const StTensor *wte = safetensors_find(&st, "transformer.wte.weight");
    long off = (long)((const char *)wte->data - (const char *)st.map) + (long)TOK_V * 64 * 4;
    static float pad[64 * 64];
    memcpy(pad, (const char *)wte->data + (long)TOK_V * 64 * 4, sizeof pad);
    for (size_t i = 0; i < 64 * 64; i++)
        pad[i] *= 20.0f;
    safetensors_close(&st);
    FILE *f = fopen(path, "r+b");
    REQUIRE(f && !fseek(f, off, SEEK_SET) && fwrite(pad, sizeof pad, 1, f) == 1 && !fclose(f),
            "rewriting %s", path);
    KgBackend *be = kg_cpu_backend_new(1, err);
    Gpt2 m;
    REQUIRE(be && !gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err), "%s", err);
    // the model itself now prefers padding: its raw top candidate is past the tokenizer's ids
    Gpt2State gs;
    KvSeq kv;
    int probe[3] = {100, 200, 300};
    REQUIRE(!gpt2_state_init(&gs, &m, 8, 1, err) && !kv_init(&kv, &m, err) &&
                !gpt2_prefill(&m, &gs, &kv, probe, 3, 1, err),
            "%s", err);
    KgCandidate raw;
    logits_topk(gs.logits_host, m.config.vocab_size, 1.0f, 1, &raw);
    CHECK_MSG(raw.id >= (int)TOK_V, "the padded rows should dominate (top id %d)", raw.id);
    kv_free(&kv);
    gpt2_state_free(&gs, &m);
    SchedOptions o = {.max_batch = 4,
                      .max_queue = 4,
                      .kv_blocks = 4 * kv_blocks_for(m.config.n_ctx),
                      .max_prompt = 64,
                      .step_tokens = 64};
    Sched *s;
    REQUIRE(!sched_start(&s, &m, tok, &o, err), "%s", err);
    int ids[3] = {100, 200, 300}, ok = 1;
    for (uint64_t seed = 0; seed < 8; seed++) {
        Result r;
        SchedParams p = gen_params(ids, 3, 16, 2.0f, seed);
        p.n_logprobs = 20;
        run_job(s, &p, &r);
        ok &= r.state == SCHED_DONE_LENGTH && r.n == 16;
        for (size_t i = 0; i < r.n; i++)
            ok &= r.ids[i] < (int)TOK_V;
        for (size_t i = 0; i < r.n_candidates; i++)
            ok &= r.candidates[i].id < (int)TOK_V;
    }
    printf("padded vocabulary (%zu rows, %zu pieces): %s\n", TOK_V + 64, TOK_V,
           ok ? "every token spelled" : "FAILED");
    CHECK(ok);
    sched_free(s);
    gpt2_close(&m);
    kg_backend_free(be);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

// A stop string split across tokens: its first bytes wait, the text ends right before it;
// bytes that turn out not to start it go out with the next token.
static void test_gentext(void) {
    const char *stops[2] = {"<end>", "xyz"};
    GenText g;
    REQUIRE(!gentext_init(&g, stops, 2), "out of memory");
    size_t len;
    char *out[4] = {0};
    CHECK(gentext_find_stop(&g) == -1 && gentext_held_back(&g) == 0); // nothing yet
    CHECK(!gentext_append(&g, "hello <e", 8) && gentext_find_stop(&g) == -1);
    CHECK(gentext_held_back(&g) == 2); // "<e" may start "<end>"
    out[0] = gentext_release(&g, g.text.len - gentext_held_back(&g), &len);
    CHECK(out[0] && len == 6 && !strcmp(out[0], "hello "));
    CHECK(!gentext_append(&g, "x", 1) && gentext_held_back(&g) == 1); // "<ex": "x" may be "xyz"
    out[1] = gentext_release(&g, g.text.len - gentext_held_back(&g), &len);
    CHECK(out[1] && len == 2 && !strcmp(out[1], "<e"));
    CHECK(!gentext_append(&g, "yz<end>", 7) && gentext_find_stop(&g) == 8); // "xyz" first
    out[2] = gentext_release(&g, (size_t)gentext_find_stop(&g), &len);
    CHECK(out[2] && len == 0);
    out[3] = gentext_release(&g, 3, &len); // before what was released: nothing
    CHECK(out[3] && len == 0 && g.released == 8);
    for (int i = 0; i < 4; i++)
        free(out[i]);
    gentext_free(&g);
    printf("generated text: stop strings across tokens, held-back bytes released\n");
}

// A job for the planner, fed up to n_fed of its prompt (decode: every token).
static SchedSeq *plan_job(const int *ids, size_t n, int score, int decode, size_t n_fed) {
    SchedParams p = {.kind = score ? SCHED_GENERATE : SCHED_NEXT_TOKEN,
                     .tokens = ids,
                     .n_tokens = n,
                     .n_candidates = 1,
                     .temperature = 1,
                     .max_tokens = 1,
                     .top_p = 1,
                     .score_prompt = score};
    SchedSeq *j;
    char err[KG_ERRLEN];
    REQUIRE(!sched_seq_new(&j, 100, &p, NULL, NULL, err), "%s", err);
    j->work.phase = decode ? SCHED_DECODE : SCHED_PREFILL;
    j->work.n_fed = n_fed;
    j->work.kv.len = n_fed; // its KV holds what it was fed: no replay
    return j;
}

// The planner: a decode row each, prompt chunks within the step's prefill budget (the rest
// waits), a scored prompt within its own logits budget, logits rows counted in order.
static void test_plan(void) {
    int ids[100] = {0};
    SchedSeq *jobs[5] = {plan_job(ids, 10, 0, 1, 10), plan_job(ids, 100, 1, 0, 0),
                         plan_job(ids, 50, 0, 0, 40), plan_job(ids, 60, 0, 0, 0),
                         plan_job(ids, 20, 0, 1, 20)};
    Gpt2Seq seqs[5];
    SchedPlanEntry plan[5];
    size_t rows, n = sched_plan_step(jobs, 5, 48, seqs, plan, &rows);
    // decode 1 | scored 32 of 100 (its budget) | the last 10 of 50 | 6 of 60 (budget spent) |
    // decode 1
    CHECK(n == 5 && rows == 1 + 32 + 10 + 6 + 1);
    size_t want_n[5] = {1, SCHED_PLAN_SCORE_ROWS, 10, 6, 1};
    Gpt2Logits want_logits[5] = {GPT2_LOGITS_LAST, GPT2_LOGITS_ALL, GPT2_LOGITS_LAST,
                                 GPT2_LOGITS_NONE, GPT2_LOGITS_LAST};
    size_t want_row[5] = {0, 1, 33, 34, 34};
    for (size_t i = 0; i < 5 && n == 5; i++)
        CHECK_MSG(seqs[i].n == want_n[i] && seqs[i].logits == want_logits[i] &&
                      plan[i].job == jobs[i] && plan[i].first_row == want_row[i],
                  "entry %zu: n %zu, logits %d, first row %zu", i, seqs[i].n, seqs[i].logits,
                  plan[i].first_row);
    n = sched_plan_step(jobs + 1, 3, 8, seqs, plan, &rows); // 8 rows: the later prompts wait
    CHECK(n == 1 && rows == 8 && plan[0].job == jobs[1]);
    // the step's token budget less the 2 decode rows, at least 16, and 256 when none decodes
    CHECK(sched_plan_prefill_budget(jobs, 5, 48) == 46);
    CHECK(sched_plan_prefill_budget(jobs, 5, 8) == SCHED_MIN_PREFILL_ROWS);
    CHECK(sched_plan_prefill_budget(jobs + 1, 3, 48) == SCHED_IDLE_PREFILL_ROWS);
    // a preempted job (its KV emptied) first replays what it had, without logits
    jobs[2]->work.kv.len = 0;
    n = sched_plan_step(jobs + 2, 1, 30, seqs, plan, &rows);
    CHECK(n == 1 && rows == 30 && plan[0].replay && seqs[0].logits == GPT2_LOGITS_NONE &&
          seqs[0].tokens == jobs[2]->in.tokens);
    for (size_t i = 0; i < 5; i++)
        sched_seq_free(jobs[i]);
    printf("batch planner: prefill and scoring budgets, decode rows, logits rows in order, "
           "replays\n");
}

int main(void) {
    test_gentext();
    test_plan();
    SchedTestModel f;
    sched_test_open(&f);
    Sched *s = sched_test_start(&f);
    test_batched_equals_alone(s, f.tok);
    test_text_and_stop(s, f.tok);
    test_limits(s, f.m.config.n_ctx);
    sched_free(s);
    test_queue_full(&f.m, f.tok);
    test_preemption(&f.m, f.tok);
    test_padded_vocab(f.tok);
    sched_test_close(&f);
    return check_report();
}
