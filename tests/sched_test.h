// sched_test.h — what test_server_sched_answers.c and test_server_sched_batch.c share: the
// small random model both schedule on (2 layers, C 64, V the default model's tokenizer's
// 12,000 pieces) with that tokenizer (models/default, shipped), the engine's options, and a job
// run to its end with its output copied out. Header-only, as testmodel.h; one test per process.
#ifndef TESTS_SCHED_TEST_H
#define TESTS_SCHED_TEST_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/gpt2.h"
#include "server/engine/sched.h"
#include "server/engine/sched_seq.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"

#define TOL   1e-4f // logprobs of batched/cached runs vs the direct forward: float32 sums reordered
#define TOK_V ((size_t)12000) // the default model's tokenizer: its pieces

// Counts the engine's notifications, for a reader to wait on.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int signals;
} Waiter;

// The engine's notify callback: ctx is a Waiter.
static inline void on_notify(void *ctx) {
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

// Reads j until it ends (w wakes the reader), into *r.
static inline void wait_done(SchedSeq *j, Waiter *w, Result *r) {
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

// The one Waiter every job of a test notifies.
static Waiter g_w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

// Submits p (REQUIRE: accepted); release the job with sched_seq_release().
static inline SchedSeq *submit(Sched *s, const SchedParams *p) {
    SchedSeq *j = NULL;
    char err[KG_ERRLEN];
    int rc = sched_submit(s, p, on_notify, &g_w, &j, err);
    REQUIRE(rc == KG_OK, "sched_submit: %s", err);
    return j;
}

// Submits p and waits for its end: its output in *r.
static inline void run_job(Sched *s, const SchedParams *p, Result *r) {
    SchedSeq *j = submit(s, p);
    wait_done(j, &g_w, r);
    sched_seq_release(j);
}

// The largest |logprob difference| of a[0..k) and b[0..k); *same_ids: the ids agree in order.
static inline float max_cand_diff(const KgCandidate *a, const KgCandidate *b, size_t k,
                                  int *same_ids) {
    float d = 0;
    *same_ids = 1;
    for (size_t i = 0; i < k; i++) {
        *same_ids &= a[i].id == b[i].id;
        float e = fabsf(a[i].logprob - b[i].logprob);
        d = e > d ? e : d;
    }
    return d;
}

// A next-token job: ten candidates at temperature 1, speculation on.
static inline SchedParams next_params(const int *ids, size_t n) {
    return (SchedParams){.kind = SCHED_NEXT_TOKEN,
                         .tokens = ids,
                         .n_tokens = n,
                         .n_candidates = 10,
                         .temperature = 1.0f,
                         .speculate = 1};
}

// A generation of max_tokens tokens (EOS ignored) at temp, top_p 1, with seed.
static inline SchedParams gen_params(const int *ids, size_t n, size_t max_tokens, float temp,
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

// The model the engine tests run on, and what it needs.
typedef struct {
    char dir[32]; // the random model's directory, removed by sched_test_close()
    Tokenizer *tok;
    KgBackend *be;
    Gpt2 m;
} SchedTestModel;

// Writes the random model and opens it with the default model's tokenizer; SKIP (77) when
// the tokenizer is not there, REQUIRE (exit 1) on any other failure.
static inline void sched_test_open(SchedTestModel *f) {
    const char *src = getenv("KG_SOURCE_DIR");
    char tokpath[1024], err[KG_ERRLEN];
    snprintf(tokpath, sizeof tokpath, "%s/models/default/kogpt2-default.model", src ? src : "..");
    if (access(tokpath, R_OK))
        SKIP("%s not found: the engine test needs the default model's tokenizer", tokpath);
    snprintf(f->dir, sizeof f->dir, "/tmp/kg-sched-XXXXXX");
    REQUIRE(mkdtemp(f->dir), "mkdtemp");
    TestModelSpec spec = {.L = 2,
                          .C = 64,
                          .NH = 4,
                          .T = 256,
                          .V = TOK_V,
                          .dtype = KG_F32,
                          .wte_std = 0.5f,
                          .seed = 11};
    REQUIRE(!testmodel_write(f->dir, &spec, err), "%s", err);
    REQUIRE(!tok_open(&f->tok, tokpath, err), "%s", err);
    REQUIRE(tok_vocab_size(f->tok) == TOK_V, "%s: %zu pieces", tokpath, tok_vocab_size(f->tok));
    f->be = kg_cpu_backend_new(2, err);
    REQUIRE(f->be, "%s", err);
    REQUIRE(!gpt2_open(&f->m, f->dir, f->be, KG_DTYPE_AUTO, err), "%s", err);
}

// The engine the tests share: 8 rows a step, room for 8 full contexts, prompt chunks of 32,
// speculation on.
static inline Sched *sched_test_start(SchedTestModel *f) {
    char err[KG_ERRLEN];
    SchedOptions o = {.max_batch = 8,
                      .max_queue = 16,
                      .kv_blocks = 8 * kv_blocks_for(f->m.config.n_ctx),
                      .cache_blocks = 4 * kv_blocks_for(f->m.config.n_ctx),
                      .max_prompt = 256,
                      .step_tokens = 32,
                      .speculate = 1};
    Sched *s;
    REQUIRE(!sched_start(&s, &f->m, f->tok, &o, err), "%s", err);
    return s;
}

static inline void sched_test_close(SchedTestModel *f) {
    gpt2_close(&f->m);
    kg_backend_free(f->be);
    tok_free(f->tok);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", f->dir);
}

#endif
