// bench_speeds.h — the prefill and decode timing bench_model (CPU) and bench_cuda (GPU)
// share: one model directory on one backend, best of a few runs each.
#ifndef BENCH_SPEEDS_H
#define BENCH_SPEEDS_H

#include "bench_util.h"
#include "model/gpt2.h"

typedef struct {
    double prefill20_ms;          // a typical cold prompt in the Explorer
    double prefill64, prefill512; // tok/s
    double decode;                // tok/s over 128 steps after a 64-token prompt
} BenchSpeeds;

// Opens dir on be, warms up with a warmup-token prompt (touches every weight page; on a GPU
// also lets cuBLAS pick its kernels and the staging and scratch reach their sizes), then
// times. *weight_bytes: what one forward reads. dtype: as gpt2_open's (KG_DTYPE_AUTO keeps
// the file's; KG_Q8_0 / KG_Q4_0 quantize at load). KG_OK or an error with err filled.
static inline int bench_speeds_dtype(KgBackend *be, const char *dir, KgDtype dtype, size_t warmup,
                                     BenchSpeeds *out, size_t *weight_bytes, char *err) {
    Gpt2 m;
    Gpt2State s = {0};
    KvSeq kv = {0};
    int rc = gpt2_open(&m, dir, be, dtype, err);
    if (rc) return rc;
    size_t V = m.config.vocab_size;
    *weight_bytes = gpt2_weight_bytes(&m);
    if ((rc = gpt2_state_init(&s, &m, 512, 1, err)) || (rc = kv_init(&kv, &m, err))) goto end;
    int tokens[640];
    uint64_t rng = 7;
    for (int i = 0; i < 640; i++)
        tokens[i] = (int)(bench_rand(&rng) % V);
    if ((rc = gpt2_prefill(&m, &s, &kv, tokens, warmup, 1, err))) goto end;
    size_t lens[3] = {20, 64, 512};
    double best[3];
    for (int i = 0; i < 3; i++) {
        best[i] = 1e30;
        // gpt2_prefill waits for the logits (on a GPU too): each run is timed whole
        for (int rep = 0; rep < (lens[i] < 512 ? 5 : 2); rep++) {
            kv_seq_truncate(&kv, 0);
            double t0 = kg_now_s();
            if ((rc = gpt2_prefill(&m, &s, &kv, tokens, lens[i], 1, err))) goto end;
            double dt = kg_now_s() - t0;
            best[i] = dt < best[i] ? dt : best[i];
        }
    }
    out->prefill20_ms = best[0] * 1e3;
    out->prefill64 = 64 / best[1];
    out->prefill512 = 512 / best[2];
    kv_seq_truncate(&kv, 0);
    if ((rc = gpt2_prefill(&m, &s, &kv, tokens, 64, 1, err))) goto end;
    double t0 = kg_now_s();
    for (int step = 0; step < 128; step++) {
        Gpt2Seq q = {&kv, &tokens[64 + step], 1, GPT2_LOGITS_LAST};
        if ((rc = gpt2_forward(&m, &s, &q, 1, err))) goto end;
    }
    out->decode = 128.0 / (kg_now_s() - t0);
end:
    kv_free(&kv);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    return rc;
}

static inline int bench_speeds(KgBackend *be, const char *dir, size_t warmup, BenchSpeeds *out,
                               size_t *weight_bytes, char *err) {
    return bench_speeds_dtype(be, dir, KG_DTYPE_AUTO, warmup, out, weight_bytes, err);
}

#endif
