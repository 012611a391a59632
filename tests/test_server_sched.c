// test_server_sched — the engine against the model core it schedules on: a next-token answer
// equals a direct forward; a cached prompt, a prompt extending a cached one and a
// speculated click give the same numbers as a cold run; concurrent generations (batched)
// equal the same generations run one at a time; a seed repeats; stop strings cut the text;
// a full queue says busy; a cancelled job stops; a pass that gives way (the speculation's,
// when a job arrives) leaves its cache as it was; a pool too small for the batch preempts
// and recomputes jobs without changing what they generate. Without a model: the generated text's
// stop strings and held-back bytes (gentext.h), the batch planner's budgets (sched_plan.h),
// /v1/score's memo (score_memo.h). A next-token answer's lens and attention view equal the
// model's capture run directly, alone and batched with generations.
//
// A small random model (2 layers, C 64, V the tokenizer's) with the default model's tokenizer
// (models/default, shipped). Tolerances: logprobs of batched/cached runs within 1e-4
// of the direct forward (float32 sums in a different order); generated ids identical.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/gpt2.h"
#include "model/gpt2_capture.h"
#include "model/logits.h"
#include "model/sampler.h"
#include "server/engine/gentext.h"
#include "server/engine/sched.h"
#include "server/engine/sched_plan.h"
#include "server/engine/sched_seq.h"
#include "server/engine/score_memo.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"

#define TOL   1e-4f
#define TOK_V ((size_t)12000) // the default model's tokenizer: its pieces

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int signals;
} Waiter;

static void on_notify(void *ctx) {
    Waiter *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->signals++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

// A finished job's output, copied out of the job: generated ids, the text, the
// candidates of the first entry, the final state and figures.
typedef struct {
    int ids[512];
    size_t n;
    char text[8192];
    KgCandidate candidates[10];
    size_t n_candidates;
    SchedState state;
    SchedStats stats;
} Result;

static void wait_done(SchedSeq *j, Waiter *w, Result *r) {
    memset(r, 0, sizeof *r);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int seen = w->signals;
        pthread_mutex_unlock(&w->mu);
        SchedToken t[16];
        size_t got = sched_seq_read(j, t, 16, &r->state);
        for (size_t i = 0; i < got; i++) {
            if (t[i].id >= 0 && r->n < 512) r->ids[r->n++] = t[i].id;
            strncat(r->text, t[i].text ? t[i].text : "", sizeof r->text - strlen(r->text) - 1);
            if (t[i].n_candidates && !r->n_candidates) {
                r->n_candidates = t[i].n_candidates < 10 ? t[i].n_candidates : 10;
                memcpy(r->candidates, t[i].candidates, r->n_candidates * sizeof *r->candidates);
            }
        }
        if (got) continue;
        if (r->state != SCHED_RUNNING) break;
        pthread_mutex_lock(&w->mu);
        while (w->signals == seen)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
    sched_seq_stats(j, &r->stats);
}

static Waiter g_w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static SchedSeq *submit(Sched *s, const SchedParams *p) {
    SchedSeq *j = NULL;
    char err[KG_ERRLEN];
    int rc = sched_submit(s, p, on_notify, &g_w, &j, err);
    REQUIRE(rc == KG_OK, "sched_submit: %s", err);
    return j;
}

static void run_job(Sched *s, const SchedParams *p, Result *r) {
    SchedSeq *j = submit(s, p);
    wait_done(j, &g_w, r);
    sched_seq_release(j);
}

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

static float max_cand_diff(const KgCandidate *a, const KgCandidate *b, size_t k, int *same_ids) {
    float d = 0;
    *same_ids = 1;
    for (size_t i = 0; i < k; i++) {
        *same_ids &= a[i].id == b[i].id;
        float e = fabsf(a[i].logprob - b[i].logprob);
        d = e > d ? e : d;
    }
    return d;
}

static SchedParams next_params(const int *ids, size_t n) {
    return (SchedParams){.kind = SCHED_NEXT_TOKEN,
                         .tokens = ids,
                         .n_tokens = n,
                         .n_candidates = 10,
                         .temperature = 1.0f,
                         .speculate = 1};
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

    run_job(s, &p, &r); // the same prompt again: whole from the cache
    d = max_cand_diff(r.candidates, ref, 10, &same);
    printf("cached prompt: max |d logprob| %.2e, cached %zu/%zu\n", d, r.stats.cached_tokens, n);
    CHECK(same && d <= TOL && r.stats.cached_tokens == n);

    // the click: the prompt plus its best candidate, speculated while the engine was idle
    int *ext = malloc((n + 1) * sizeof *ext);
    memcpy(ext, ids, n * sizeof *ext);
    ext[n] = ref[0].id;
    direct_topk(m, ext, n + 1, ref2, 10);
    usleep(300 * 1000); // let the idle engine speculate
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

static SchedParams gen_params(const int *ids, size_t n, size_t max_tokens, float temp,
                              uint64_t seed) {
    return (SchedParams){.kind = SCHED_GENERATE,
                         .tokens = ids,
                         .n_tokens = n,
                         .max_tokens = max_tokens,
                         .temperature = temp,
                         .top_p = 1.0f,
                         .seed = seed,
                         .ignore_eos = 1};
}

static void test_batched_equals_alone(Sched *s, const Tokenizer *tok) {
    const char *texts[6] = {"오늘 날씨가", "한국어 모델은", "여러분 2019년 수고하셨습니다.",
                            "서울",        "이 영화 정말",  "옛날 옛적에 호랑이가"};
    int *ids[6];
    size_t n[6];
    char err[KG_ERRLEN];
    for (int i = 0; i < 6; i++)
        REQUIRE(!tok_encode(tok, texts[i], strlen(texts[i]), &ids[i], &n[i], err), "%s", err);
    Result alone[6], together[6];
    for (int i = 0; i < 6; i++) {
        SchedParams p = gen_params(ids[i], n[i], 12, i % 2 ? 0.8f : 0.0f, 1234 + i);
        run_job(s, &p, &alone[i]);
    }
    SchedSeq *jobs[6];
    for (int i = 0; i < 6; i++) {
        SchedParams p = gen_params(ids[i], n[i], 12, i % 2 ? 0.8f : 0.0f, 1234 + i);
        jobs[i] = submit(s, &p);
    }
    int same = 1;
    for (int i = 0; i < 6; i++) {
        wait_done(jobs[i], &g_w, &together[i]);
        same &= together[i].n == alone[i].n;
        for (size_t k = 0; same && k < alone[i].n; k++)
            same &= together[i].ids[k] == alone[i].ids[k];
        CHECK(together[i].state == SCHED_DONE_LENGTH && together[i].stats.generated_tokens == 12);
        sched_seq_release(jobs[i]);
    }
    printf("6 generations batched vs one at a time (greedy and seeded): ids %s\n",
           same ? "identical" : "DIFFER");
    CHECK(same);
    for (int i = 0; i < 6; i++)
        free(ids[i]);
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
    const char *texts[6] = {"오늘 날씨가", "한국어 모델은", "여러분 2019년 수고하셨습니다.",
                            "서울",        "이 영화 정말",  "옛날 옛적에 호랑이가"};
    int *ids[6];
    size_t n[6];
    for (int i = 0; i < 6; i++)
        REQUIRE(!tok_encode(tok, texts[i], strlen(texts[i]), &ids[i], &n[i], err), "%s", err);
    Result alone[6], together[6];
    for (int i = 0; i < 6; i++) {
        SchedParams p = gen_params(ids[i], n[i], 100, i % 2 ? 0.8f : 0.0f, 99 + i);
        run_job(s, &p, &alone[i]);
    }
    SchedGauges g0, g1;
    sched_gauges(s, &g0);
    SchedSeq *jobs[6];
    for (int i = 0; i < 6; i++) {
        SchedParams p = gen_params(ids[i], n[i], 100, i % 2 ? 0.8f : 0.0f, 99 + i);
        jobs[i] = submit(s, &p);
    }
    int same = 1;
    for (int i = 0; i < 6; i++) {
        wait_done(jobs[i], &g_w, &together[i]);
        same &= together[i].n == alone[i].n && alone[i].n == 100;
        for (size_t k = 0; same && k < alone[i].n; k++)
            same &= together[i].ids[k] == alone[i].ids[k];
        CHECK(together[i].state == SCHED_DONE_LENGTH);
        sched_seq_release(jobs[i]);
    }
    // the engine publishes the pool's figures after the step that dropped the last job
    for (int t = 0; t < 200 && (sched_gauges(s, &g1), g1.kv.used); t++)
        usleep(10 * 1000);
    uint64_t preempted = g1.preemptions_total - g0.preemptions_total;
    printf("6 x 100 tokens in 17 blocks: %llu preemptions, ids %s the runs alone\n",
           (unsigned long long)preempted, same ? "equal to" : "DIFFER from");
    CHECK(same && preempted > 0 && g1.kv.used == 0);
    sched_free(s);
    for (int i = 0; i < 6; i++)
        free(ids[i]);
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
    // a long generation, cancelled: it ends as cancelled, well before max_tokens
    p = gen_params(big, 8, 400, 1.0f, 1);
    j = submit(s, &p);
    usleep(20 * 1000);
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
    test_gentext();
    test_plan();
    test_score_memo();
    const char *src = getenv("KG_SOURCE_DIR");
    char tokpath[1024];
    snprintf(tokpath, sizeof tokpath, "%s/models/default/kogpt2-default.model", src ? src : "..");
    if (access(tokpath, R_OK))
        SKIP("%s not found: the engine test needs the default model's tokenizer", tokpath);
    char err[KG_ERRLEN], dir[] = "/tmp/kg-sched-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    TestModelSpec spec = {.L = 2,
                          .C = 64,
                          .NH = 4,
                          .T = 256,
                          .V = TOK_V,
                          .dtype = KG_F32,
                          .wte_std = 0.5f,
                          .seed = 11};
    REQUIRE(!testmodel_write(dir, &spec, err), "%s", err);
    Tokenizer *tok;
    REQUIRE(!tok_open(&tok, tokpath, err), "%s", err);
    REQUIRE(tok_vocab_size(tok) == TOK_V, "%s: %zu pieces", tokpath, tok_vocab_size(tok));
    KgBackend *be = kg_cpu_backend_new(2, err);
    REQUIRE(be, "%s", err);
    Gpt2 m;
    REQUIRE(!gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err), "%s", err);
    SchedOptions o = {.max_batch = 8,
                      .max_queue = 16,
                      .kv_blocks = 8 * kv_blocks_for(m.config.n_ctx),
                      .cache_blocks = 4 * kv_blocks_for(m.config.n_ctx),
                      .max_prompt = 256,
                      .step_tokens = 32,
                      .speculate = 1};
    Sched *s;
    REQUIRE(!sched_start(&s, &m, tok, &o, err), "%s", err);

    int *ids;
    size_t n;
    const char *prompt = "여러분 2019년 수고하셨습니다. 올해에는";
    REQUIRE(!tok_encode(tok, prompt, strlen(prompt), &ids, &n, err), "%s", err);
    test_next_token_and_cache(s, &m, ids, n);
    test_forward_cancel(&m, ids, n);
    test_batched_equals_alone(s, tok);
    test_text_and_stop(s, tok);
    test_limits(s, m.config.n_ctx);
    test_prompt_scoring(s, &m, tok);
    test_explain(s, &m, tok);
    sched_free(s);
    test_queue_full(&m, tok);
    test_preemption(&m, tok);
    test_padded_vocab(tok);

    free(ids);
    gpt2_close(&m);
    kg_backend_free(be);
    tok_free(tok);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
