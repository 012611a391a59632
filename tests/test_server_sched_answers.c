// test_server_sched_answers — what one job of the engine answers equals the model run
// directly: a next-token answer equals a direct forward; a cached prompt, a prompt extending
// a cached one and a speculated click give the same numbers as a cold run; a pass that gives
// way (the speculation's, when a job arrives) leaves its cache as it was; prompt scoring's
// logprobs equal the forward's over the whole prompt, alone and beside a generation; a
// next-token answer's lens and attention view equal the model's capture run directly, alone
// and batched with generations. Without a model: /v1/score's memo (score_memo.h).
// test_server_sched_batch has how jobs share the engine.
//
// The model, the tokenizer and the tolerances: sched_test.h (logprobs within 1e-4 of the
// direct forward: float32 sums in a different order; generated ids identical).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/gpt2.h"
#include "model/gpt2_capture.h"
#include "model/logits.h"
#include "sched_test.h"
#include "server/engine/sched.h"
#include "server/engine/sched_seq.h"
#include "server/engine/score_memo.h"
#include "tokenizer/tokenizer.h"

// The reference: a direct prefill of the prompt, top-k over its last logits.
static void direct_topk(const Gpt2 *m, const int *ids, size_t n, KgCandidate *out, size_t k) {
    char err[KG_ERRLEN];
    Gpt2State st;
    KvSeq kv;
    REQUIRE(!gpt2_state_init(&st, m, 64, 1, err) && !kv_init(&kv, m, err), "%s", err);
    REQUIRE(!gpt2_prefill(m, &st, &kv, ids, n, 1, err), "%s", err);
    logits_topk(st.logits_host, m->config.vocab_size, 1.0f, k, out);
    kv_free(&kv);
    gpt2_state_free(&st, m);
}

static void test_next_token_and_cache(Sched *s, const Gpt2 *m, const int *ids, size_t n) {
    KgCandidate ref[10], ref2[10];
    direct_topk(m, ids, n, ref, 10);
    Result r;
    SchedParams p = next_params(ids, n);
    int same;
    run_job(s, &p, &r);
    CHECK(r.n == 0 && r.n_candidates == 10 && r.state == SCHED_DONE_LENGTH);
    float d = max_cand_diff(r.candidates, ref, 10, &same);
    printf("next-token vs direct forward: max |d logprob| %.2e (tol %.0e), cached %zu/%zu\n", d,
           TOL, r.stats.cached_tokens, r.stats.prompt_tokens);

    CHECK(same && d <= TOL && r.stats.cached_tokens == 0);

    SchedGauges g;
    sched_gauges(s, &g);
    uint64_t spec0 = g.speculations_total;
    run_job(s, &p, &r); // the same prompt again: whole from the cache
    d = max_cand_diff(r.candidates, ref, 10, &same);
    printf("cached prompt: max |d logprob| %.2e, cached %zu/%zu\n", d, r.stats.cached_tokens, n);
    CHECK(same && d <= TOL && r.stats.cached_tokens == n);

    // the click: the prompt plus its best candidate, speculated while the engine was idle
    int *ext = malloc((n + 1) * sizeof *ext);
    memcpy(ext, ids, n * sizeof *ext);
    ext[n] = ref[0].id;
    direct_topk(m, ext, n + 1, ref2, 10);
    // the idle engine's speculation after that answer finished (a 300 ms sleep guessed it: short
    // for a sanitized build on a loaded machine); one after the first answer, of the same
    // prompt, counts as well (its logits are the same)
    WAIT_UNTIL((sched_gauges(s, &g), g.speculations_total > spec0));
    CHECK_MSG(g.speculations_total > spec0, "a speculation finished in 60 s: %llu",
              (unsigned long long)g.speculations_total);
    SchedParams p2 = next_params(ext, n + 1);
    run_job(s, &p2, &r);
    d = max_cand_diff(r.candidates, ref2, 10, &same);
    printf("click on the best candidate: max |d logprob| %.2e, cached %zu/%zu, %.2f ms\n", d,
           r.stats.cached_tokens, n + 1, r.stats.total_ms);
    CHECK(same && d <= TOL && r.stats.cached_tokens == n + 1);

    // a click on a candidate outside the speculated ten: the prefix is reused, one token runs
    ext[n] = 7;
    direct_topk(m, ext, n + 1, ref2, 10);
    run_job(s, &p2, &r);
    d = max_cand_diff(r.candidates, ref2, 10, &same);
    printf("prompt extending a cached one: max |d logprob| %.2e, cached %zu/%zu\n", d,
           r.stats.cached_tokens, n + 1);
    CHECK(same && d <= TOL && r.stats.cached_tokens == n);
    free(ext);
}

static int g_cancel_asked;

static int cancel_at_third_ask(void *ctx) {
    (void)ctx;
    return ++g_cancel_asked == 3;
}

// --- the lens and the attention view of a next-token answer (issue 36) ---

#define EX_K 5 // lens tokens per stage

// What a next-token job with lens and attention answered: each stage's top ids and logprobs, the
// answer's first candidate's rank per stage, the attention (L, NH, P); cached tokens.
typedef struct {
    int top[16][EX_K];
    float lp[16][EX_K];
    size_t rank0[16], stages, first_stage, cached;
    float att[2 * 4 * 64];
    size_t n_att;
} Explained;

static void run_explain(Sched *s, const SchedParams *p, Explained *e) {
    SchedSeq *j = submit(s, p);
    memset(e, 0, sizeof *e);
    SchedState st = SCHED_RUNNING;
    while (st == SCHED_RUNNING) {
        SchedToken t;
        if (!sched_seq_read(j, &t, 1, &st)) {
            usleep(1000);
            continue;
        }
        const SchedExplain *x = t.explain;
        REQUIRE(x && x->lens.n_stages <= 16 && x->lens.k == EX_K, "no explain in the answer");
        e->stages = x->lens.n_stages;
        e->first_stage = x->lens.first_top_stage;
        for (size_t k = 0; k < e->stages; k++) {
            e->rank0[k] = x->lens.rank[k * x->lens.n_tracked];
            for (size_t i = 0; i < EX_K; i++) {
                e->top[k][i] = x->lens.top[k * EX_K + i].id;
                e->lp[k][i] = x->lens.top[k * EX_K + i].logprob;
            }
        }
        e->n_att = x->layers * x->heads * (x->attention_pos + 1);
        REQUIRE(e->n_att <= sizeof e->att / sizeof e->att[0], "attention too large");
        memcpy(e->att, x->attention, e->n_att * sizeof *e->att);
    }
    SchedStats stats;
    sched_seq_stats(j, &stats);
    e->cached = stats.cached_tokens;
    CHECK(st == SCHED_DONE_LENGTH);
    sched_seq_release(j);
}

// 1 when a and b agree: the same top ids per stage, logprobs within tol, attention within 1e-5.
static int same_explained(const Explained *a, const Explained *b, float tol, float *worst) {
    int ok = a->stages == b->stages && a->n_att == b->n_att && a->first_stage == b->first_stage;
    *worst = 0;
    for (size_t k = 0; ok && k < a->stages; k++)
        for (size_t i = 0; i < EX_K; i++) {
            ok &= a->top[k][i] == b->top[k][i] && a->rank0[k] == b->rank0[k];
            *worst = fmaxf(*worst, fabsf(a->lp[k][i] - b->lp[k][i]));
        }
    for (size_t i = 0; ok && i < a->n_att; i++)
        ok &= fabsf(a->att[i] - b->att[i]) <= 1e-5f;
    return ok && *worst <= tol;
}

// The engine's explain answers: alone, cold, = the model's capture run directly; the same while
// generations share its passes (batched, prompt chunks of 32); a lens on a cached prompt runs its
// last token again; what the engine refuses.
static void test_explain(Sched *s, const Gpt2 *m, const Tokenizer *tok) {
    const char *text =
        "대한민국의 수도는 서울이다. 서울은 한강을 끼고 있으며 인구는 약 천만 명이다. "
        "부산은 남쪽의 항구 도시이고, 제주도는 섬이다. 여러분 2019년 수고하셨습니다. "
        "올해에는 더 좋은 일이 가득하길 바랍니다.";
    int *ids;
    size_t n;
    char err[KG_ERRLEN];
    REQUIRE(!tok_encode(tok, text, strlen(text), &ids, &n, err), "%s", err);
    REQUIRE(n > 32 && n <= 64, "the prompt has %zu tokens, want 33..64 (two prefill chunks)", n);
    const size_t pos = n - 3; // the attention of a position before the last
    SchedParams p = next_params(ids, n);
    p.speculate = 0;
    p.lens = 1;
    p.lens_k = EX_K;
    p.attention = 1;
    p.attention_pos = pos;
    Explained alone, batched, direct = {0};
    run_explain(s, &p, &alone);
    // the model's own capture, one pass over the prompt
    Gpt2State st;
    KvSeq kv;
    Gpt2Capture c;
    REQUIRE(!gpt2_state_init(&st, m, 64, 1, err) && !kv_init(&kv, m, err) &&
                !gpt2_capture_init(&c, m, 1, n - 1, 1, pos, err),
            "%s", err);
    Gpt2Capture *const caps[1] = {&c};
    st.captures = caps;
    REQUIRE(!gpt2_prefill(m, &st, &kv, ids, n, 1, err), "%s", err);
    KgCandidate best;
    logits_topk(st.logits_host, m->config.vocab_size, 1.0f, 1, &best);
    Gpt2Lens l;
    REQUIRE(!gpt2_capture_lens(m, &c, m->config.vocab_size, EX_K, &best.id, 1, &l, err), "%s", err);
    direct.stages = l.n_stages;
    direct.first_stage = l.first_top_stage;
    for (size_t k = 0; k < l.n_stages; k++) {
        direct.rank0[k] = l.rank[k];
        for (size_t i = 0; i < EX_K; i++) {
            direct.top[k][i] = l.top[k * EX_K + i].id;
            direct.lp[k][i] = l.top[k * EX_K + i].logprob;
        }
    }
    direct.n_att = m->config.n_layer * m->config.n_head * (pos + 1);
    REQUIRE(!gpt2_capture_attention(m, &c, direct.att, err), "%s", err);
    gpt2_lens_free(&l);
    gpt2_capture_free(&c, m);
    kv_free(&kv);
    gpt2_state_free(&st, m);
    float worst;
    CHECK(same_explained(&alone, &direct, TOL, &worst));
    printf("explain in the engine vs the model's capture: lens logprobs within %.2e (tol %.0e)\n",
           worst, TOL);
    CHECK(alone.cached == 0); // the attention needs every key: no cached prefix

    // beside three generations that share its passes
    const char *gen[3] = {"오늘 날씨가", "한국어 모델은", "옛날 옛적에 호랑이가"};
    SchedSeq *jobs[3];
    int *gids[3];
    for (int i = 0; i < 3; i++) {
        size_t gn;
        REQUIRE(!tok_encode(tok, gen[i], strlen(gen[i]), &gids[i], &gn, err), "%s", err);
        SchedParams g = {.kind = SCHED_GENERATE,
                         .tokens = gids[i],
                         .n_tokens = gn,
                         .temperature = 0,
                         .max_tokens = 24,
                         .top_p = 1,
                         .ignore_eos = 1};
        jobs[i] = submit(s, &g);
    }
    run_explain(s, &p, &batched);
    for (int i = 0; i < 3; i++) {
        Result r;
        wait_done(jobs[i], &g_w, &r);
        sched_seq_release(jobs[i]);
        free(gids[i]);
    }
    CHECK(same_explained(&batched, &direct, TOL, &worst));
    printf("explain batched with 3 generations: lens logprobs within %.2e\n", worst);

    // the lens alone on a prompt the cache holds whole: its last token runs again
    SchedParams plain = next_params(ids, n);
    plain.speculate = 0;
    Result r;
    run_job(s, &plain, &r);
    run_job(s, &plain, &r);
    CHECK(r.stats.cached_tokens == n);
    SchedParams lens_only = plain;
    lens_only.lens = 1;
    lens_only.lens_k = EX_K;
    SchedSeq *j = submit(s, &lens_only);
    SchedState state = SCHED_RUNNING;
    int got_lens = 0;
    while (state == SCHED_RUNNING) {
        SchedToken t;
        if (!sched_seq_read(j, &t, 1, &state)) {
            usleep(1000);
            continue;
        }
        got_lens =
            t.explain && t.explain->lens.n_stages == direct.stages && !t.explain->attention &&
            t.explain->lens.top[(direct.stages - 1) * EX_K].id == direct.top[direct.stages - 1][0];
    }
    SchedStats stats;
    sched_seq_stats(j, &stats);
    sched_seq_release(j);
    CHECK(got_lens && stats.cached_tokens == n - 1);

    // refused: an explain on a generation, a position past the prompt, a top_k of 0
    SchedParams bad = p;
    bad.kind = SCHED_GENERATE;
    bad.max_tokens = 1;
    bad.top_p = 1;
    CHECK(sched_submit(s, &bad, on_notify, &g_w, &j, err) == KG_EINVAL);
    bad = p;
    bad.attention_pos = n;
    CHECK(sched_submit(s, &bad, on_notify, &g_w, &j, err) == KG_ERANGE);
    bad = p;
    bad.lens_k = 0;
    CHECK(sched_submit(s, &bad, on_notify, &g_w, &j, err) == KG_EINVAL);
    free(ids);
}

// A pass stopped by Gpt2State.cancel (at its third ask: before this 2-layer model's LM head)
// returns KG_ECANCEL with the cache's length unchanged, and the same pass run again gives bit for
// bit the logits of a cache that never saw the cancelled one (the speculation runs again later).
static void test_forward_cancel(const Gpt2 *m, const int *ids, size_t n) {
    char err[KG_ERRLEN];
    const size_t V = m->config.vocab_size;
    Gpt2State st, ref_st;
    KvSeq kv, ref_kv;
    REQUIRE(!gpt2_state_init(&st, m, 64, 1, err) && !gpt2_state_init(&ref_st, m, 64, 1, err) &&
                !kv_init(&kv, m, err) && !kv_init(&ref_kv, m, err),
            "%s", err);
    Gpt2Seq q = {&kv, ids + n - 1, 1, GPT2_LOGITS_LAST},
            ref_q = {&ref_kv, ids + n - 1, 1, GPT2_LOGITS_LAST};
    REQUIRE(!gpt2_prefill(m, &st, &kv, ids, n - 1, 0, err) &&
                !gpt2_prefill(m, &ref_st, &ref_kv, ids, n - 1, 0, err) &&
                !gpt2_forward(m, &ref_st, &ref_q, 1, err),
            "%s", err);
    st.cancel = cancel_at_third_ask;
    int rc = gpt2_forward(m, &st, &q, 1, err);
    printf("cancelled pass: rc %d, cache %zu/%zu positions, asked %d times\n", rc, kv.len, n - 1,
           g_cancel_asked);
    CHECK(rc == KG_ECANCEL && kv.len == n - 1 && g_cancel_asked == 3);
    st.cancel = NULL;
    REQUIRE(!gpt2_forward(m, &st, &q, 1, err), "%s", err);
    CHECK(kv.len == n && !memcmp(st.logits_host, ref_st.logits_host, V * sizeof(float)));
    kv_free(&kv);
    kv_free(&ref_kv);
    gpt2_state_free(&st, m);
    gpt2_state_free(&ref_st, m);
}

// Prompt scoring (echo + logprobs): every prompt token's logprob equals the direct forward's
// over the whole prompt (GPT2_LOGITS_ALL), through several steps (a prompt longer than the
// per-step scoring rows) and beside a generation sharing the batch; the first token has no
// score; the generation after the scores equals one without scoring.
static void test_prompt_scoring(Sched *s, const Gpt2 *m, const Tokenizer *tok) {
    const char *text =
        "대한민국의 수도는 서울이다. 서울은 한강을 끼고 있으며 인구는 약 천만 명이다. "
        "부산은 대한민국 제2의 도시로 항구가 유명하다. 오늘은 날씨가 맑고 "
        "바람이 시원하게 분다. 내일도 좋은 하루가 되기를 바란다.";
    int *ids;
    size_t n;
    char err[KG_ERRLEN];
    REQUIRE(!tok_encode(tok, text, strlen(text), &ids, &n, err), "%s", err);
    REQUIRE(n > 40, "the scoring prompt should span several steps (%zu tokens)", n);
    // the reference: one forward over the whole prompt, logits at every position
    const size_t V = m->config.vocab_size;
    Gpt2State st;
    KvSeq kv;
    REQUIRE(!gpt2_state_init(&st, m, n, n, err) && !kv_init(&kv, m, err), "%s", err);
    Gpt2Seq q = {&kv, ids, n, GPT2_LOGITS_ALL};
    REQUIRE(!gpt2_forward(m, &st, &q, 1, err), "%s", err);
    // a generation in the same batches, and the scoring job itself (3 candidates, 4 tokens)
    int other[3] = {100, 200, 300};
    SchedSeq *jo = submit(
        s,
        &(SchedParams){
            .kind = SCHED_GENERATE, .tokens = other, .n_tokens = 3, .max_tokens = 24, .top_p = 1});
    SchedParams ps = gen_params(ids, n, 4, 0.0f, 7);
    ps.score_prompt = 1;
    ps.n_logprobs = 3;
    SchedSeq *j = submit(s, &ps);
    size_t n_scored = 0, n_gen = 0, first_unscored = 0, top_ok = 1;
    int gen[8];
    float worst = 0;
    SchedState state = SCHED_RUNNING;
    for (;;) {
        pthread_mutex_lock(&g_w.mu);
        int seen = g_w.signals;
        pthread_mutex_unlock(&g_w.mu);
        SchedToken t[16];
        size_t got = sched_seq_read(j, t, 16, &state);
        for (size_t i = 0; i < got; i++) {
            if (!t[i].prompt) {
                if (t[i].id >= 0 && n_gen < 8) gen[n_gen++] = t[i].id;
                continue;
            }
            size_t pos = n_scored++;
            if (pos >= n || t[i].id != ids[pos]) {
                CHECK_MSG(0, "score %zu is for token %d, the prompt has %d", pos, t[i].id,
                          pos < n ? ids[pos] : -1);
                continue;
            }
            if (pos == 0) {
                first_unscored = isnan(t[i].logprob) && t[i].n_candidates == 0;
                continue;
            }
            const float *row = st.logits_host + (pos - 1) * V;
            float want = (float)(row[ids[pos]] - logits_logsumexp(row, V, 1.0f));
            float d = fabsf(t[i].logprob - want);
            worst = d > worst ? d : worst;
            KgCandidate ref[3];
            logits_topk(row, V, 1.0f, 3, ref);
            int same;
            top_ok &= t[i].n_candidates == 3 &&
                      max_cand_diff(t[i].candidates, ref, 3, &same) <= TOL && same;
        }
        if (got) continue;
        if (state != SCHED_RUNNING) break;
        pthread_mutex_lock(&g_w.mu);
        while (g_w.signals == seen)
            pthread_cond_wait(&g_w.cv, &g_w.mu);
        pthread_mutex_unlock(&g_w.mu);
    }
    sched_seq_release(j);
    Result ro, plain;
    wait_done(jo, &g_w, &ro);
    sched_seq_release(jo);
    run_job(s,
            &(SchedParams){.kind = SCHED_GENERATE,
                           .tokens = ids,
                           .n_tokens = n,
                           .max_tokens = 4,
                           .top_p = 1,
                           .seed = 7},
            &plain);
    printf("prompt scoring: %zu of %zu tokens scored, max |d logprob| %.2e vs one forward; "
           "then %zu generated\n",
           n_scored, n, worst, n_gen);
    CHECK(state == SCHED_DONE_LENGTH && n_scored == n && first_unscored && top_ok);
    CHECK_MSG(worst <= TOL, "scored logprobs differ by %g", worst);
    CHECK(n_gen == 4 && plain.n == 4 && !memcmp(gen, plain.ids, 4 * sizeof *gen));
    CHECK(ro.state == SCHED_DONE_LENGTH && ro.n == 24);
    // scoring alone (max_tokens 0) is allowed; plain generation still needs max_tokens >= 1
    ps.max_tokens = 0;
    Result r0;
    run_job(s, &ps, &r0);
    CHECK(r0.state == SCHED_DONE_LENGTH && r0.stats.generated_tokens == 0);
    ps.score_prompt = 0;
    SchedSeq *bad = NULL;
    CHECK(sched_submit(s, &ps, on_notify, &g_w, &bad, err) == KG_EINVAL && !bad);
    kv_free(&kv);
    gpt2_state_free(&st, m);
    free(ids);
}

// The memo answers the longest remembered prefix, and only the 16 prompts scored last.
static void test_score_memo(void) {
    ScoreMemo *m = score_memo_new();
    REQUIRE(m, "out of memory");
    int a[4] = {5, 6, 7, 8}, b[3] = {5, 6, 9};
    ScorePos pos[4] = {{.id = 5}, {.id = 6, .rank = 2}, {.id = 7, .rank = 1}, {.id = 8}}, got[4];
    CHECK(score_memo_lookup(m, a, 4, got) == 0);
    score_memo_insert(m, a, pos, 4);
    CHECK(score_memo_lookup(m, b, 3, got) == 2 && got[1].rank == 2);
    CHECK(score_memo_lookup(m, a, 3, got) == 3 && got[2].rank == 1);
    for (int i = 0; i < 16; i++) // 16 other prompts push a out
        score_memo_insert(m, b, pos, 3);
    CHECK(score_memo_lookup(m, a, 4, got) == 2); // b's prefix only
    CHECK(score_memo_lookup(NULL, a, 4, got) == 0);
    score_memo_free(m);
    printf("score memo: longest remembered prefix, oldest prompt replaced\n");
}

int main(void) {
    test_score_memo();
    SchedTestModel f;
    sched_test_open(&f);
    Sched *s = sched_test_start(&f);
    int *ids;
    size_t n;
    char err[KG_ERRLEN];
    const char *prompt = "여러분 2019년 수고하셨습니다. 올해에는";
    REQUIRE(!tok_encode(f.tok, prompt, strlen(prompt), &ids, &n, err), "%s", err);
    test_next_token_and_cache(s, &f.m, ids, n);
    test_forward_cancel(&f.m, ids, n);
    test_prompt_scoring(s, &f.m, f.tok);
    test_explain(s, &f.m, f.tok);
    sched_free(s);
    free(ids);
    sched_test_close(&f);
    return check_report();
}
