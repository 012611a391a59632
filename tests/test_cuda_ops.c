// test_cuda_ops.c — every op of the CUDA backend against the CPU backend on the same random
// inputs: encoder, layer norm, matmul (every weight dtype, fused GELU), attention (training
// and the paged cache), element-wise ops, cross-entropy, AdamW, top-k; and an injected kernel
// fault. test_cuda_model.c runs the whole model. Errors and tolerances: cuda_test.h.
//
// Usage: test_cuda_ops [ops|attention|fault]   (ctest label "gpu"; without a usable GPU it
// prints "SKIP: no CUDA device (why)" and exits 77)
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_test.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "model/kgmath.h"

// One host array copied to both backends.
typedef struct {
    void *c, *g; // CPU, GPU memory
    size_t bytes;
} Pair;

static Pair pair_put(const void *host, size_t bytes) {
    Pair p = {g_cpu->ops->alloc(g_cpu, bytes), g_gpu->ops->alloc(g_gpu, bytes), bytes};
    REQUIRE(p.c && p.g, "alloc %zu bytes", bytes);
    g_cpu->ops->to_device(g_cpu, p.c, host, bytes);
    g_gpu->ops->to_device(g_gpu, p.g, host, bytes);
    return p;
}

static Pair pair_rnd(size_t n, float scale) {
    float *h = rnd_vec(n, scale);
    Pair p = pair_put(h, n * sizeof(float));
    free(h);
    return p;
}

static void pair_free(Pair *p) {
    g_cpu->ops->free(g_cpu, p->c);
    g_gpu->ops->free(g_gpu, p->g);
}

// A weight matrix of n random values in dtype dt on both backends.
static Pair pair_weights(size_t n, KgDtype dt, float scale) {
    float *h = rnd_vec(n, scale);
    uint16_t *half = malloc(n * 2 + 2);
    REQUIRE(half, "out of memory");
    for (size_t i = 0; i < n; i++)
        half[i] = dt == KG_F16 ? kg_f32_to_f16(h[i]) : kg_f32_to_bf16(h[i]);
    Pair p = dt == KG_F32 ? pair_put(h, n * 4) : pair_put(half, n * 2);
    free(h);
    free(half);
    return p;
}

// Compares n floats of p (GPU against CPU); prints the error.
static void compare(const char *what, Pair p, size_t n, double tol) {
    float *c = malloc(n * sizeof *c + 4), *g = malloc(n * sizeof *g + 4);
    REQUIRE(c && g, "out of memory");
    g_cpu->ops->to_host(g_cpu, c, p.c, n * sizeof *c);
    g_gpu->ops->to_host(g_gpu, g, p.g, n * sizeof *g);
    double e = rel_err(g, c, n);
    printf("  %-44s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK_MSG(e <= tol, "%s: rel err %.3e > %.0e", what, e, tol);
    free(c);
    free(g);
}

static void test_encoder(void) {
    printf("encoder\n");
    const size_t V = 37, T = 19, N = 13;
    int tokens[13], pos[13];
    for (size_t n = 0; n < N; n++) {
        tokens[n] = (int)(rnd_u32() % 5); // repeats: the backward's scatter must add up
        pos[n] = (int)(rnd_u32() % T);
    }
    const size_t Cs[] = {48, 100};
    for (size_t ci = 0; ci < 2; ci++)
        for (KgDtype dt = KG_F32; dt <= KG_BF16; dt++) {
            size_t C = Cs[ci];
            Pair wte = pair_weights(V * C, dt, 1.0f), wpe = pair_weights(T * C, dt, 1.0f);
            Pair out = pair_rnd(N * C, 1.0f);
            g_cpu->ops->encoder_forward(g_cpu, out.c, tokens, pos, (KgMat){wte.c, dt, 1},
                                        (KgMat){wpe.c, dt, 1}, N, C);
            g_gpu->ops->encoder_forward(g_gpu, out.g, tokens, pos, (KgMat){wte.g, dt, 1},
                                        (KgMat){wpe.g, dt, 1}, N, C);
            char what[96];
            snprintf(what, sizeof what, "encoder_forward C=%zu %s", C, dt_name(dt));
            compare(what, out, N * C, TOL_F32_SHORT);
            if (dt == KG_F32) { // training: f32 tables; gradients start non-zero (+=)
                Pair dwte = pair_rnd(V * C, 1.0f), dwpe = pair_rnd(T * C, 1.0f);
                Pair dout = pair_rnd(N * C, 1.0f);
                g_cpu->ops->encoder_backward(g_cpu, dwte.c, dwpe.c, dout.c, tokens, pos, N, C);
                g_gpu->ops->encoder_backward(g_gpu, dwte.g, dwpe.g, dout.g, tokens, pos, N, C);
                snprintf(what, sizeof what, "encoder_backward dwte C=%zu", C);
                compare(what, dwte, V * C, TOL_F32_SHORT);
                snprintf(what, sizeof what, "encoder_backward dwpe C=%zu", C);
                compare(what, dwpe, T * C, TOL_F32_SHORT);
                pair_free(&dwte);
                pair_free(&dwpe);
                pair_free(&dout);
            }
            pair_free(&wte);
            pair_free(&wpe);
            pair_free(&out);
        }
    // weights_map: the GPU copies, the CPU keeps the host pointer; both read the same
    const size_t C = 48;
    float *h = rnd_vec(V * C, 1.0f), *p = rnd_vec(T * C, 1.0f);
    KgMat wc = {g_cpu->ops->weights_map(g_cpu, h, V * C * 4), KG_F32, 1};
    KgMat wg = {g_gpu->ops->weights_map(g_gpu, h, V * C * 4), KG_F32, 1};
    KgMat pc = {g_cpu->ops->weights_map(g_cpu, p, T * C * 4), KG_F32, 1};
    KgMat pg = {g_gpu->ops->weights_map(g_gpu, p, T * C * 4), KG_F32, 1};
    REQUIRE(wg.data && pg.data, "weights_map");
    Pair out = pair_rnd(N * C, 1.0f);
    g_cpu->ops->encoder_forward(g_cpu, out.c, tokens, pos, wc, pc, N, C);
    g_gpu->ops->encoder_forward(g_gpu, out.g, tokens, pos, wg, pg, N, C);
    compare("encoder_forward from weights_map", out, N * C, TOL_F32_SHORT);
    pair_free(&out);
    free(h);
    free(p);
}

static void test_layernorm(void) {
    printf("layernorm\n");
    const size_t shapes[][2] = {{1, 64}, {7, 48}, {33, 769}, {64, 768}};
    for (size_t s = 0; s < 4; s++) {
        size_t N = shapes[s][0], C = shapes[s][1];
        Pair x = pair_rnd(N * C, 2.0f), w = pair_rnd(C, 1.0f), b = pair_rnd(C, 1.0f);
        Pair out = pair_rnd(N * C, 1.0f), mean = pair_rnd(N, 1.0f), rstd = pair_rnd(N, 1.0f);
        g_cpu->ops->layernorm_forward(g_cpu, out.c, mean.c, rstd.c, x.c, w.c, b.c, N, C, 1e-5f);
        g_gpu->ops->layernorm_forward(g_gpu, out.g, mean.g, rstd.g, x.g, w.g, b.g, N, C, 1e-5f);
        char what[96];
        snprintf(what, sizeof what, "layernorm_forward %zux%zu out", N, C);
        compare(what, out, N * C, TOL_F32_SHORT);
        snprintf(what, sizeof what, "layernorm_forward %zux%zu mean", N, C);
        compare(what, mean, N, TOL_F32_SHORT);
        snprintf(what, sizeof what, "layernorm_forward %zux%zu rstd", N, C);
        compare(what, rstd, N, TOL_F32_SHORT);
        // in place (the final layer norm of gpt2_forward), no statistics
        g_cpu->ops->layernorm_forward(g_cpu, x.c, NULL, NULL, x.c, w.c, b.c, N, C, 1e-5f);
        g_gpu->ops->layernorm_forward(g_gpu, x.g, NULL, NULL, x.g, w.g, b.g, N, C, 1e-5f);
        snprintf(what, sizeof what, "layernorm_forward %zux%zu in place", N, C);
        compare(what, x, N * C, TOL_F32_SHORT);
        // backward from the forward's statistics of the (now normalized) x; grads start non-zero
        g_cpu->ops->layernorm_forward(g_cpu, out.c, mean.c, rstd.c, x.c, w.c, b.c, N, C, 1e-5f);
        g_gpu->ops->layernorm_forward(g_gpu, out.g, mean.g, rstd.g, x.g, w.g, b.g, N, C, 1e-5f);
        Pair dx = pair_rnd(N * C, 1.0f), dw = pair_rnd(C, 1.0f), db = pair_rnd(C, 1.0f);
        Pair dout = pair_rnd(N * C, 1.0f);
        g_cpu->ops->layernorm_backward(g_cpu, dx.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, N,
                                       C);
        g_gpu->ops->layernorm_backward(g_gpu, dx.g, dw.g, db.g, dout.g, x.g, w.g, mean.g, rstd.g, N,
                                       C);
        snprintf(what, sizeof what, "layernorm_backward %zux%zu dinp", N, C);
        compare(what, dx, N * C, TOL_F32_SHORT);
        snprintf(what, sizeof what, "layernorm_backward %zux%zu dw", N, C);
        compare(what, dw, C, TOL_F32_SHORT);
        snprintf(what, sizeof what, "layernorm_backward %zux%zu db", N, C);
        compare(what, db, C, TOL_F32_SHORT);
        Pair all[] = {x, w, b, out, mean, rstd, dx, dw, db, dout};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            pair_free(&all[i]);
    }
}

static double weight_tol(KgDtype dt, KgDtype mixed) {
    if (dt == KG_F16) return TOL_F16_W;
    if (dt == KG_BF16) return TOL_BF16_W;
    return mixed == KG_F16 ? TOL_MIXED_F16 : mixed == KG_BF16 ? TOL_MIXED_BF16 : TOL_F32_SHORT;
}

// One matmul shape: forward in every weight dtype; backward (f32 weights) in f32 and mixed.
static void matmul_case(size_t N, size_t C, size_t OC, int transposed, int with_bias) {
    char what[128];
    Pair inp = pair_rnd(N * C, 1.0f), bias = pair_rnd(OC, 1.0f), out = pair_rnd(N * OC, 1.0f);
    for (KgDtype dt = KG_F32; dt <= KG_BF16; dt++) {
        Pair w = pair_weights(C * OC, dt, 0.1f);
        g_cpu->ops->matmul_forward(g_cpu, out.c, inp.c, (KgMat){w.c, dt, transposed},
                                   with_bias ? bias.c : NULL, N, C, OC);
        g_gpu->ops->matmul_forward(g_gpu, out.g, inp.g, (KgMat){w.g, dt, transposed},
                                   with_bias ? bias.g : NULL, N, C, OC);
        snprintf(what, sizeof what, "matmul_forward %zux%zux%zu%s%s %s", N, C, OC,
                 transposed ? " T" : "", with_bias ? " +b" : "", dt_name(dt));
        compare(what, out, N * OC, weight_tol(dt, KG_F32));
        pair_free(&w);
    }
    const KgDtype mixes[] = {KG_F32, KG_F16, KG_BF16};
    Pair w = pair_weights(C * OC, KG_F32, 0.1f), dout = pair_rnd(N * OC, 1.0f);
    for (size_t mi = 0; mi < 3; mi++) {
        g_gpu->mixed = mixes[mi];
        KgMat wc = {w.c, KG_F32, transposed}, wg = {w.g, KG_F32, transposed};
        double tol = weight_tol(KG_F32, mixes[mi]);
        if (mi) { // mixed forward (the f32 forward is above)
            g_cpu->ops->matmul_forward(g_cpu, out.c, inp.c, wc, with_bias ? bias.c : NULL, N, C,
                                       OC);
            g_gpu->ops->matmul_forward(g_gpu, out.g, inp.g, wg, with_bias ? bias.g : NULL, N, C,
                                       OC);
            snprintf(what, sizeof what, "matmul_forward %zux%zux%zu%s mixed %s", N, C, OC,
                     transposed ? " T" : "", dt_name(mixes[mi]));
            compare(what, out, N * OC, tol);
        }
        Pair dinp = pair_rnd(N * C, 1.0f), dw = pair_rnd(C * OC, 1.0f), db = pair_rnd(OC, 1.0f);
        g_cpu->ops->matmul_backward(g_cpu, dinp.c, dw.c, with_bias ? db.c : NULL, dout.c, inp.c, wc,
                                    N, C, OC);
        g_gpu->ops->matmul_backward(g_gpu, dinp.g, dw.g, with_bias ? db.g : NULL, dout.g, inp.g, wg,
                                    N, C, OC);
        if (!mi) tol = TOL_F32_LONG;
        snprintf(what, sizeof what, "matmul_backward %zux%zux%zu%s %s dinp", N, C, OC,
                 transposed ? " T" : "", dt_name(mixes[mi]));
        compare(what, dinp, N * C, tol);
        snprintf(what, sizeof what, "matmul_backward %zux%zux%zu%s %s dw", N, C, OC,
                 transposed ? " T" : "", dt_name(mixes[mi]));
        compare(what, dw, C * OC, tol);
        if (with_bias) { // column sums of dout in f32 whatever the mix
            snprintf(what, sizeof what, "matmul_backward %zux%zux%zu %s dbias", N, C, OC,
                     dt_name(mixes[mi]));
            compare(what, db, OC, TOL_F32_SHORT);
        }
        pair_free(&dinp);
        pair_free(&dw);
        pair_free(&db);
    }
    g_gpu->mixed = KG_F32;
    pair_free(&w);
    pair_free(&dout);
    pair_free(&inp);
    pair_free(&bias);
    pair_free(&out);
}

// The MLP's fused matmul + bias + GELU, with and without the pre-GELU output, both GELUs
// (the GPU's tanh runs in cuBLASLt's epilogue, erf as two ops), f32 and f16 weights.
static void matmul_gelu_case(size_t N, size_t C, size_t OC, int transposed) {
    char what[128];
    Pair inp = pair_rnd(N * C, 1.0f), bias = pair_rnd(OC, 1.0f);
    Pair out = pair_rnd(N * OC, 1.0f), pre = pair_rnd(N * OC, 1.0f);
    for (KgDtype dt = KG_F32; dt <= KG_F16; dt++)
        for (int kind = GPT2_GELU_TANH; kind <= GPT2_RELU; kind++)
            for (int with_pre = 0; with_pre < 2; with_pre++) {
                Pair w = pair_weights(C * OC, dt, 0.1f);
                g_cpu->ops->matmul_gelu_forward(g_cpu, out.c, with_pre ? pre.c : NULL, inp.c,
                                                (KgMat){w.c, dt, transposed}, bias.c, N, C, OC,
                                                (Gpt2Gelu)kind);
                g_gpu->ops->matmul_gelu_forward(g_gpu, out.g, with_pre ? pre.g : NULL, inp.g,
                                                (KgMat){w.g, dt, transposed}, bias.g, N, C, OC,
                                                (Gpt2Gelu)kind);
                snprintf(what, sizeof what, "matmul_gelu_forward %zux%zux%zu%s %s %s%s", N, C, OC,
                         transposed ? " T" : "", dt_name(dt),
                         kind == GPT2_GELU_TANH ? "tanh"
                         : kind == GPT2_RELU    ? "relu"
                                                : "erf",
                         with_pre ? " +pre" : "");
                compare(what, out, N * OC, weight_tol(dt, KG_F32));
                if (with_pre) compare(what, pre, N * OC, weight_tol(dt, KG_F32));
                pair_free(&w);
            }
    pair_free(&inp);
    pair_free(&bias);
    pair_free(&out);
    pair_free(&pre);
}

static void test_matmul(void) {
    printf("matmul\n");
    matmul_gelu_case(5, 48, 64, 0);
    matmul_gelu_case(128, 768, 3072, 0); // KoGPT2's c_fc
    matmul_gelu_case(128, 768, 3072, 1); // as the GPU holds it
    matmul_case(1, 64, 192, 0, 1);       // a decode step
    matmul_case(5, 48, 37, 0, 0);        // odd everything
    matmul_case(5, 48, 37, 1, 1);        // transposed, odd
    matmul_case(33, 96, 131, 0, 1);      // odd rows and columns
    matmul_case(128, 768, 2304, 0, 1);   // KoGPT2's qkv
    matmul_case(64, 768, 1001, 1, 0);    // an LM head (tied: transposed, no bias)
    // few rows (matvec.cu, transposed W: how gpt2_open hands the GPU every matrix): KoGPT2's
    // decode shapes at every row count it takes, then shapes it leaves to cuBLAS
    for (size_t n = 1; n <= 5; n++) {    // 5: past CUDA_MATVEC_ROWS, cuBLAS again
        matmul_case(n, 768, 2304, 1, 1); // qkv
        matmul_case(n, 3072, 768, 1, 1); // the MLP's projection: long rows
        matmul_case(n, 768, 4100, 1, 0); // an LM head: a partial block of warps
    }
    matmul_case(3, 200, 136, 1, 1);    // C not a multiple of 32 lanes x 8
    matmul_case(2, 8, 8, 1, 0);        // one 16-byte load per row
    matmul_case(1, 36, 64, 1, 0);      // C not a multiple of 8: cuBLAS for f16/bf16
    matmul_case(1, 768, 2304, 0, 1);   // W as stored (C, OC): cuBLAS
    matmul_gelu_case(1, 768, 3072, 1); // the MLP's first matmul in a decode step
    matmul_gelu_case(3, 64, 264, 1);
}

static const uint32_t ONE_BLOCK[1] = {0}; // training: every position in block 0

// One attention configuration: sequences given as (pos0, n); training (att saved, keys and
// values inside qkv, backward) when train is set, which needs pos0 = 0. Inference reads a
// paged cache as kv.h lays it out: blocks of 16 positions, each head's rows together, keys
// then values, the block table in reverse order so that no two neighbours are adjacent; the
// new rows go in through kv_store first (compared exactly: a copy).
static void attention_case(const size_t (*sp)[2], size_t n_seq, size_t NH, size_t hs, int train) {
    const size_t C = NH * hs, ld_q = 3 * C, head = 16 * hs, block = 2 * NH * head;
    size_t N = 0;
    for (size_t i = 0; i < n_seq; i++)
        N += sp[i][1];
    KgAttnSeq sc[8], sg[8];
    uint32_t table[8][64];
    Pair kv[8], att[8];
    Pair qkv = pair_rnd(N * ld_q, 1.0f), out = pair_rnd(N * C, 1.0f);
    Pair dqkv = pair_rnd(N * ld_q, 1.0f), dout = pair_rnd(N * C, 1.0f);
    char what[128];
    for (size_t i = 0, row0 = 0; i < n_seq; row0 += sp[i][1], i++) {
        size_t pos0 = sp[i][0], n = sp[i][1], Tk = pos0 + n, nb = (Tk + 15) / 16;
        sc[i] = sg[i] = (KgAttnSeq){.row0 = row0, .n = n, .pos0 = pos0, .kv_dtype = KG_F32};
        if (train) { // keys and values are qkv's columns C.. and 2C.., as in gpt2_train.c
            att[i] = pair_rnd(NH * n * Tk, 1.0f);
            sc[i].k = (float *)qkv.c + row0 * ld_q + C;
            sc[i].v = (float *)qkv.c + row0 * ld_q + 2 * C;
            sg[i].k = (float *)qkv.g + row0 * ld_q + C;
            sg[i].v = (float *)qkv.g + row0 * ld_q + 2 * C;
            sc[i].blocks = sg[i].blocks = ONE_BLOCK;
            sc[i].block_shift = sg[i].block_shift = 31;
            sc[i].head_stride = sg[i].head_stride = hs * sizeof(float);
            sc[i].row_stride = sg[i].row_stride = ld_q * sizeof(float);
            sc[i].att = att[i].c;
            sg[i].att = att[i].g;
            sc[i].dk = (float *)dqkv.c + row0 * ld_q + C;
            sc[i].dv = (float *)dqkv.c + row0 * ld_q + 2 * C;
            sg[i].dk = (float *)dqkv.g + row0 * ld_q + C;
            sg[i].dv = (float *)dqkv.g + row0 * ld_q + 2 * C;
        } else { // nb blocks of (K, V) x NH heads x 16 positions x hs
            REQUIRE(nb <= 64, "a test sequence of %zu positions", Tk);
            kv[i] = pair_rnd(nb * block + 1, 1.0f);
            for (size_t b = 0; b < nb; b++)
                table[i][b] = (uint32_t)(nb - 1 - b);
            sc[i].k = kv[i].c;
            sc[i].v = (float *)kv[i].c + NH * head;
            sg[i].k = kv[i].g;
            sg[i].v = (float *)kv[i].g + NH * head;
            sc[i].blocks = sg[i].blocks = table[i];
            sc[i].block_shift = sg[i].block_shift = 4;
            sc[i].block_stride = sg[i].block_stride = block * sizeof(float);
            sc[i].head_stride = sg[i].head_stride = head * sizeof(float);
            sc[i].row_stride = sg[i].row_stride = hs * sizeof(float);
        }
    }
    if (!train) {
        const float *qc = qkv.c, *qg = qkv.g;
        g_cpu->ops->kv_store(g_cpu, sc, n_seq, qc + C, qc + 2 * C, ld_q, NH, hs);
        g_gpu->ops->kv_store(g_gpu, sg, n_seq, qg + C, qg + 2 * C, ld_q, NH, hs);
        for (size_t i = 0; i < n_seq; i++) {
            snprintf(what, sizeof what, "kv_store seq %zu NH=%zu hs=%zu", i, NH, hs);
            compare(what, kv[i], (sp[i][0] + sp[i][1] + 15) / 16 * block, 0.0);
        }
    }
    g_cpu->ops->attention_forward(g_cpu, out.c, qkv.c, ld_q, sc, n_seq, NH, hs);
    g_gpu->ops->attention_forward(g_gpu, out.g, qkv.g, ld_q, sg, n_seq, NH, hs);
    snprintf(what, sizeof what, "attention_forward %zu seqs NH=%zu hs=%zu%s", n_seq, NH, hs,
             train ? " train" : "");
    compare(what, out, N * C, TOL_F32_SHORT);
    if (train) {
        for (size_t i = 0; i < n_seq; i++) {
            size_t Tk = sp[i][0] + sp[i][1];
            snprintf(what, sizeof what, "attention_forward seq %zu att", i);
            compare(what, att[i], NH * sp[i][1] * Tk, TOL_F32_SHORT);
        }
        g_cpu->ops->attention_backward(g_cpu, dqkv.c, dout.c, qkv.c, ld_q, sc, n_seq, NH, hs);
        g_gpu->ops->attention_backward(g_gpu, dqkv.g, dout.g, qkv.g, ld_q, sg, n_seq, NH, hs);
        snprintf(what, sizeof what, "attention_backward NH=%zu hs=%zu dq,dk,dv", NH, hs);
        compare(what, dqkv, N * ld_q, TOL_F32_LONG);
    }
    for (size_t i = 0; i < n_seq; i++)
        pair_free(train ? &att[i] : &kv[i]);
    pair_free(&qkv);
    pair_free(&out);
    pair_free(&dqkv);
    pair_free(&dout);
}

static void test_attention(void) {
    printf("attention\n");
    // a prefill, a decode step deep in its cache, a sequence with no new rows, a long chunk
    const size_t infer[][2] = {{0, 17}, {40, 1}, {9, 0}, {5, 64}, {100, 33}};
    attention_case(infer, 5, 12, 64, 0);
    attention_case(infer, 5, 4, 13, 0); // odd head size
    attention_case(infer, 5, 2, 80, 0); // head size over one warp's width
    const size_t train[][2] = {{0, 33}, {0, 33}, {0, 7}};
    attention_case(train, 3, 4, 64, 1);
    attention_case(train, 3, 3, 12, 1);
}

static void test_elementwise(void) {
    printf("element-wise\n");
    const size_t n = 1000003;
    Pair a = pair_rnd(n, 4.0f), b = pair_rnd(n, 4.0f), out = pair_rnd(n, 1.0f);
    const Gpt2Gelu kinds[] = {GPT2_GELU_TANH, GPT2_GELU_ERF, GPT2_RELU};
    const char *const fwd[] = {"gelu_forward tanh", "gelu_forward erf", "gelu_forward relu"};
    const char *const bwd[] = {"gelu_backward tanh", "gelu_backward erf", "gelu_backward relu"};
    for (int k = 0; k < 3; k++) {
        g_cpu->ops->gelu_forward(g_cpu, out.c, a.c, n, kinds[k]);
        g_gpu->ops->gelu_forward(g_gpu, out.g, a.g, n, kinds[k]);
        compare(fwd[k], out, n, TOL_F32_SHORT);
        g_cpu->ops->gelu_backward(g_cpu, out.c, a.c, b.c, n, kinds[k]); // += onto the forward
        g_gpu->ops->gelu_backward(g_gpu, out.g, a.g, b.g, n, kinds[k]);
        compare(bwd[k], out, n, TOL_F32_SHORT);
    }
    g_cpu->ops->residual_forward(g_cpu, out.c, a.c, b.c, n);
    g_gpu->ops->residual_forward(g_gpu, out.g, a.g, b.g, n);
    compare("residual_forward", out, n, TOL_F32_SHORT);
    g_cpu->ops->residual_forward(g_cpu, a.c, a.c, b.c, n); // out = a, as gpt2.c calls it
    g_gpu->ops->residual_forward(g_gpu, a.g, a.g, b.g, n);
    compare("residual_forward in place", a, n, TOL_F32_SHORT);
    pair_free(&a);
    pair_free(&b);
    pair_free(&out);
}

static void test_crossentropy(void) {
    printf("crossentropy\n");
    const size_t shapes[][2] = {{9, 1001}, {4, 51200}};
    for (size_t s = 0; s < 2; s++) {
        size_t N = shapes[s][0], V = shapes[s][1];
        int targets[9];
        size_t valid = 0;
        for (size_t i = 0; i < N; i++) {
            targets[i] = i % 4 == 2 ? -1 : (int)(rnd_u32() % V);
            valid += targets[i] >= 0;
        }
        Pair logits = pair_rnd(N * V, 8.0f), losses = pair_rnd(N, 1.0f);
        float dscale = 1.0f / (float)valid;
        g_cpu->ops->crossentropy_forward_backward(g_cpu, losses.c, logits.c, targets, N, V, dscale);
        g_gpu->ops->crossentropy_forward_backward(g_gpu, losses.g, logits.g, targets, N, V, dscale);
        char what[96];
        snprintf(what, sizeof what, "crossentropy %zux%zu losses", N, V);
        compare(what, losses, N, TOL_F32_SHORT);
        snprintf(what, sizeof what, "crossentropy %zux%zu dlogits", N, V);
        compare(what, logits, N * V, TOL_F32_SHORT);
        pair_free(&logits);
        pair_free(&losses);
    }
}

static void test_adamw(void) {
    printf("adamw, sum_squares\n");
    const size_t n = 100003;
    float *zeros = calloc(n, sizeof *zeros);
    REQUIRE(zeros, "out of memory");
    Pair p = pair_rnd(n, 1.0f), m = pair_put(zeros, n * 4), v = pair_put(zeros, n * 4);
    free(zeros);
    for (int t = 1; t <= 3; t++) {
        Pair g = pair_rnd(n, 1.0f);
        KgAdamWStep a = kg_adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, (uint64_t)t);
        g_cpu->ops->adamw_update(g_cpu, p.c, g.c, m.c, v.c, n, &a);
        g_gpu->ops->adamw_update(g_gpu, p.g, g.g, m.g, v.g, n, &a);
        pair_free(&g);
    }
    compare("adamw_update x3 params", p, n, TOL_F32_SHORT);
    compare("adamw_update x3 m", m, n, TOL_F32_SHORT);
    compare("adamw_update x3 v", v, n, TOL_F32_SHORT);
    // sum of squares of the same floats on both sides (the AdamW results above may differ in
    // the last bit: FMA contraction), accumulated in double: they agree to ~1e-12
    float *ph = malloc(n * sizeof *ph);
    REQUIRE(ph, "out of memory");
    g_gpu->ops->to_host(g_gpu, ph, p.g, n * sizeof *ph);
    g_cpu->ops->to_device(g_cpu, p.c, ph, n * sizeof *ph);
    free(ph);
    double sc = g_cpu->ops->sum_squares(g_cpu, p.c, n), sg = g_gpu->ops->sum_squares(g_gpu, p.g, n);
    double sg2 = g_gpu->ops->sum_squares(g_gpu, p.g, n);
    printf("  sum_squares cpu %.17g gpu %.17g\n", sc, sg);
    CHECK_MSG(fabs(sg - sc) <= 1e-12 * sc, "sum_squares %.17g vs %.17g", sg, sc);
    CHECK_MSG(sg == sg2, "sum_squares is not deterministic: %.17g then %.17g", sg, sg2);
    float bad[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        g_gpu->ops->to_device(g_gpu, (float *)p.g + n / 2, &bad[i], sizeof bad[i]);
        double s = g_gpu->ops->sum_squares(g_gpu, p.g, n);
        CHECK_MSG(!isfinite(s), "sum_squares with a %s gives %g", i ? "inf" : "NaN", s);
    }
    CHECK(g_gpu->ops->sum_squares(g_gpu, p.g, 0) == 0.0);
    pair_free(&p);
    pair_free(&m);
    pair_free(&v);
}

static void test_topk(void) {
    printf("logits_topk\n");
    const size_t Vs[] = {5003, 51200};
    const size_t ks[] = {1, 10, 100, 1024, 1500, 6000}; // 1500, 6000: the host fallback
    const float temps[] = {1.0f, 0.7f};
    KgCandidate *c = malloc(6000 * sizeof *c), *g = malloc(6000 * sizeof *g);
    REQUIRE(c && g, "out of memory");
    for (size_t vi = 0; vi < 2; vi++) {
        size_t V = Vs[vi];
        float *h = malloc(V * sizeof *h);
        REQUIRE(h, "out of memory");
        for (size_t i = 0; i < V; i++) // quarters of -8..8: many ties, and some -0 vs +0
            h[i] = (float)((int)(rnd_u32() % 65) - 32) / 4.0f * (rnd_u32() % 2 ? 1.0f : -1.0f);
        Pair x = pair_put(h, V * 4);
        for (size_t ki = 0; ki < 6; ki++)
            for (int ti = 0; ti < 2; ti++) {
                size_t k = ks[ki];
                size_t nc = g_cpu->ops->logits_topk(g_cpu, x.c, V, temps[ti], k, c);
                size_t ng = g_gpu->ops->logits_topk(g_gpu, x.g, V, temps[ti], k, g);
                int ids = nc == ng, same = 1;
                double perr = 0.0;
                for (size_t i = 0; ids && i < nc; i++) {
                    ids &= c[i].id == g[i].id && c[i].logit == g[i].logit;
                    double e = fabs((double)c[i].prob - g[i].prob) / c[i].prob;
                    perr = e > perr ? e : perr;
                    same &= fabs((double)c[i].logprob - g[i].logprob) <= 1e-4;
                }
                printf("  logits_topk V=%zu k=%zu T=%.1f: %zu, ids %s, prob rel err %.1e\n", V, k,
                       temps[ti], ng, ids ? "equal" : "DIFFER", perr);
                CHECK_MSG(ids, "V=%zu k=%zu: ids or order differ", V, k);
                // probabilities: the CPU's log-sum-exp adds V/8 floats per partial sum (~6,400
                // for V = 51,200: up to ~1e-5 relative), the GPU's adds in double: 1e-4
                CHECK_MSG(perr <= 1e-4 && same, "V=%zu k=%zu: prob rel err %.2e", V, k, perr);
            }
        pair_free(&x);
        free(h);
    }
    free(c);
    free(g);
}

// A kernel that faults (an embedding row far outside the table: an illegal address) is
// asynchronous: the op returns as if nothing happened. The status op must name the fault,
// keep naming it, and the backend must still be freed without a crash. The fault is sticky
// for the process's CUDA context, hence a mode of its own (ctest test_cuda_fault).
static void test_fault(void) {
    printf("an injected kernel fault\n");
    char err[KG_ERRLEN] = "";
    const size_t C = 64;
    Pair wte = pair_rnd(16 * C, 1.0f), wpe = pair_rnd(16 * C, 1.0f), out = pair_rnd(2 * C, 1.0f);
    CHECK_MSG(g_gpu->ops->status(g_gpu, err) == KG_OK, "before the fault: %s", err);
    int tokens[2] = {3, 1 << 30}, pos[2] = {0, 1}; // row 2^30 of a 16-row table
    g_gpu->ops->encoder_forward(g_gpu, out.g, tokens, pos, (KgMat){wte.g, KG_F32, 0},
                                (KgMat){wpe.g, KG_F32, 0}, 2, C);
    int rc = g_gpu->ops->status(g_gpu, err);
    printf("  status: %d %s\n", rc, err);
    CHECK_MSG(rc != KG_OK && strstr(err, "illegal"), "the fault was not reported: %d %s", rc, err);
    err[0] = 0;
    CHECK_MSG(g_gpu->ops->status(g_gpu, err) != KG_OK && err[0], "the fault was forgotten");
    pair_free(&wte);
    pair_free(&wpe);
    pair_free(&out);
}

// test_cuda_ops            every op
// test_cuda_ops fault      an injected kernel fault (leaves the GPU context unusable)
// test_cuda_ops attention  the attention ops alone (quick under compute-sanitizer racecheck)
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ops";
    cuda_test_open();
    if (!strcmp(mode, "fault")) {
        test_fault();
    } else if (!strcmp(mode, "attention")) {
        test_attention();
    } else {
        REQUIRE(!strcmp(mode, "ops"), "unknown mode %s (ops, attention, fault)", mode);
        test_encoder();
        test_layernorm();
        test_matmul();
        test_attention();
        test_elementwise();
        test_crossentropy();
        test_adamw();
        test_topk();
    }
    cuda_test_close(!strcmp(mode, "fault"));
    return check_report();
}
