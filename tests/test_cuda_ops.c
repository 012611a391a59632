// test_cuda_ops.c — every op of the CUDA backend against the CPU backend on the same random
// inputs, then the whole model: forward logits (prefill, token-by-token decode with the KV
// cache, a mixed batch), training gradients and a few AdamW steps.
//
// Usage: test_cuda_ops [ops|attention|kogpt2|fault]   (ctest label "gpu"; without a usable GPU it
// prints "SKIP: no CUDA device (why)" and exits 77)
//
// Errors are "max |gpu - cpu| / max |cpu|" over a whole output tensor (normwise, so a
// near-zero element does not dominate). Tolerances, each stated beside its use:
// - f32: the same math in a different summation order (warp trees, cuBLAS blocking, FMA
//   contraction, atomics): ~1e-6 seen in sums of up to a few thousand terms; 1e-5 for
//   element-wise ops and short sums, 1e-4 for long sums and the whole model.
// - f16/bf16 weights: the CPU widens W and keeps f32 activations; the GPU also rounds the
//   activations to W's type (unit roundoff f16 2^-11 = 4.9e-4, bf16 2^-8 = 3.9e-3); with
//   random signs the normwise error stays within a few units of roundoff.
// - be->mixed (f32 weights, both operands rounded on the GPU only): twice that.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "model/kgmath.h"
#include "testmodel.h"

#define TOL_F32_SHORT  1e-5 // element-wise ops, layer norm, short sums
#define TOL_F32_LONG   1e-4 // matmul/attention backward, whole-model logits and gradients
#define TOL_F16_W      3e-3 // f16 weights: ~6 units of f16 roundoff
#define TOL_BF16_W     2e-2 // bf16 weights: ~5 units of bf16 roundoff
#define TOL_MIXED_F16  6e-3 // be->mixed = f16: both operands rounded
#define TOL_MIXED_BF16 4e-2 // be->mixed = bf16: both operands rounded
// whole model, f16/bf16 weights: each of the layers' matmuls rounds its activations again
#define TOL_MODEL_F16  1e-2
#define TOL_MODEL_BF16 6e-2

static KgBackend *g_cpu, *g_gpu;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

// uniform in [-scale, scale)
static float rnd_f(float scale) { return scale * ((float)rnd_u32() / 2147483648.0f - 1.0f); }

static float *rnd_vec(size_t n, float scale) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    REQUIRE(x, "out of memory");
    for (size_t i = 0; i < n; i++)
        x[i] = rnd_f(scale);
    return x;
}

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

static double rel_err(const float *got, const float *want, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        d = e > d || e != e ? e : d; // NaN counts as the worst
        m = fabs(want[i]) > m ? fabs(want[i]) : m;
    }
    return d / (m > 1e-30 ? m : 1e-30);
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

static const char *dt_name(KgDtype dt) {
    return dt == KG_F16 ? "f16" : dt == KG_BF16 ? "bf16" : "f32";
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

// --- the whole model ---

static char g_dir[] = "/tmp/test_cuda_ops.XXXXXX";

static void compare_host(const char *what, const float *got, const float *want, size_t n,
                         double tol) {
    double e = rel_err(got, want, n);
    printf("  %-44s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK_MSG(e <= tol, "%s: rel err %.3e > %.0e", what, e, tol);
}

// Logits of row r of both states after the same forward call.
static void compare_logits(const char *what, const Gpt2State *sc, const Gpt2State *sg, size_t V,
                           double tol) {
    CHECK_MSG(sc->n_logit_rows == sg->n_logit_rows, "%s: %zu vs %zu logit rows", what,
              sc->n_logit_rows, sg->n_logit_rows);
    compare_host(what, sg->logits_host, sc->logits_host, sc->n_logit_rows * V, tol);
}

// The whole model on both backends: a prompt in two chunks, decode steps, a batch, a copied
// cache. spec's dtype is the weights'.
static void test_forward(TestModelSpec spec) {
    KgDtype dt = spec.dtype;
    printf("gpt2_forward L=%zu C=%zu V=%zu %s\n", spec.L, spec.C, spec.V, dt_name(dt));
    char err[KG_ERRLEN], mdir[512];
    snprintf(mdir, sizeof mdir, "%s/%zu_%s", g_dir, spec.C, dt_name(dt));
    REQUIRE(!testmodel_write(mdir, &spec, err), "%s", err);
    Gpt2 mc, mg;
    REQUIRE(!gpt2_open(&mc, mdir, g_cpu, KG_DTYPE_AUTO, err), "%s", err);
    REQUIRE(!gpt2_open(&mg, mdir, g_gpu, KG_DTYPE_AUTO, err), "%s", err);
    Gpt2State sc, sg;
    REQUIRE(!gpt2_state_init(&sc, &mc, 32, 8, err), "%s", err);
    REQUIRE(!gpt2_state_init(&sg, &mg, 32, 8, err), "%s", err);
    KvSeq kc, kg, kc2, kg2;
    REQUIRE(!kv_init(&kc, &mc, err) && !kv_init(&kg, &mg, err), "%s", err);
    REQUIRE(!kv_init(&kc2, &mc, err) && !kv_init(&kg2, &mg, err), "%s", err);
    double tol = dt == KG_F16 ? TOL_MODEL_F16 : dt == KG_BF16 ? TOL_MODEL_BF16 : TOL_F32_LONG;
    int prompt[45];
    for (size_t i = 0; i < 45; i++)
        prompt[i] = (int)(rnd_u32() % spec.V);
    // a prompt longer than max_rows (two chunks), then eight decode steps
    REQUIRE(!gpt2_prefill(&mc, &sc, &kc, prompt, 45, 1, err), "%s", err);
    REQUIRE(!gpt2_prefill(&mg, &sg, &kg, prompt, 45, 1, err), "%s", err);
    compare_logits("prefill 45 tokens, last logits", &sc, &sg, spec.V, tol);
    for (int step = 0; step < 8; step++) {
        int tok = (int)(rnd_u32() % spec.V);
        Gpt2Seq qc = {&kc, &tok, 1, GPT2_LOGITS_LAST}, qg = {&kg, &tok, 1, GPT2_LOGITS_LAST};
        REQUIRE(!gpt2_forward(&mc, &sc, &qc, 1, err), "%s", err);
        REQUIRE(!gpt2_forward(&mg, &sg, &qg, 1, err), "%s", err);
        char what[64];
        snprintf(what, sizeof what, "decode step %d", step);
        compare_logits(what, &sc, &sg, spec.V, tol);
    }
    // one batch: a decode step of the long sequence and a fresh 6-token one, every row's logits
    int tok = 5;
    Gpt2Seq bc[2] = {{&kc, &tok, 1, GPT2_LOGITS_LAST}, {&kc2, prompt, 6, GPT2_LOGITS_ALL}};
    Gpt2Seq bg[2] = {{&kg, &tok, 1, GPT2_LOGITS_LAST}, {&kg2, prompt, 6, GPT2_LOGITS_ALL}};
    REQUIRE(!gpt2_forward(&mc, &sc, bc, 2, err), "%s", err);
    REQUIRE(!gpt2_forward(&mg, &sg, bg, 2, err), "%s", err);
    compare_logits("batch: decode + 6-token prefill, 7 rows", &sc, &sg, spec.V, tol);
    // a fork of a cache (its 6 positions' block shared, copied on write through copy_rows)
    // continues like the original
    KvSeq kg3;
    REQUIRE(!kv_seq_init(&kg3, kg2.pool, err), "%s", err);
    kv_seq_fork(&kg3, &kg2, 6);
    Gpt2Seq q3 = {&kg3, &tok, 1, GPT2_LOGITS_LAST}, q2 = {&kc2, &tok, 1, GPT2_LOGITS_LAST};
    REQUIRE(!gpt2_forward(&mc, &sc, &q2, 1, err), "%s", err);
    REQUIRE(!gpt2_forward(&mg, &sg, &q3, 1, err), "%s", err);
    compare_logits("decode from a forked cache", &sc, &sg, spec.V, tol);
    kv_seq_release(&kg3);
    kv_free(&kc);
    kv_free(&kg);
    kv_free(&kc2);
    kv_free(&kg2);
    gpt2_state_free(&sc, &mc);
    gpt2_state_free(&sg, &mg);
    gpt2_close(&mc);
    gpt2_close(&mg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", mdir); // the KoGPT2 shape is 500 MB in f32
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", mdir);
}

// test_forward with shape's weights in f32, f16 and bf16.
static void test_forward_dtypes(TestModelSpec shape) {
    for (shape.dtype = KG_F32; shape.dtype <= KG_BF16; shape.dtype++)
        test_forward(shape);
}

// Downloads a backend buffer of n floats (malloc'd).
static float *fetch(KgBackend *be, const float *dev, size_t n) {
    float *h = malloc(n * sizeof *h + 4);
    REQUIRE(h, "out of memory");
    be->ops->to_host(be, h, dev, n * sizeof *h);
    return h;
}

static void compare_grads(const Gpt2Config *c, const float *gc, const float *gg, double tol) {
    size_t nt = gpt2_param_tensors(c, NULL);
    Gpt2ParamTensor *t = malloc(nt * sizeof *t);
    REQUIRE(t, "out of memory");
    gpt2_param_tensors(c, t);
    double worst = 0.0;
    const char *worst_name = "";
    for (size_t i = 0; i < nt; i++) {
        double e = rel_err(gg + t[i].offset, gc + t[i].offset, t[i].count);
        CHECK_MSG(e <= tol, "gradient %s: rel err %.3e > %.0e", t[i].name, e, tol);
        if (e >= worst) {
            worst = e;
            worst_name = t[i].name;
        }
    }
    printf("  gradients: worst tensor %s rel err %.2e (tol %.0e)\n", worst_name, worst, tol);
    free(t);
}

static void test_train(Gpt2Gelu gelu) {
    printf("training, gelu %s\n", gelu == GPT2_GELU_ERF ? "erf" : "tanh");
    Gpt2Config c = gpt2_config_shape(2, 64, 4, 64, 301);
    c.gelu = gelu;
    const size_t B = 3, T = 33, N = B * T, P = gpt2_param_count(&c);
    char err[KG_ERRLEN];
    Gpt2 mc, mg;
    REQUIRE(!gpt2_train_model_new(&mc, &c, NULL, g_cpu, 11, err), "%s", err);
    REQUIRE(!gpt2_train_model_new(&mg, &c, NULL, g_gpu, 11, err), "%s", err);
    Gpt2Train *tc = gpt2_train_new(&mc, B, T, 0, err), *tg = gpt2_train_new(&mg, B, T, 0, err);
    REQUIRE(tc && tg, "%s", err);
    int in[99], tgt[99];
    for (size_t i = 0; i < N; i++) {
        in[i] = (int)(rnd_u32() % c.vocab_size);
        tgt[i] = i % 7 == 3 ? -1 : (int)(rnd_u32() % c.vocab_size);
    }
    float lc, lg;
    gpt2_train_zero_grad(tc);
    gpt2_train_zero_grad(tg);
    REQUIRE(!gpt2_train_forward(&mc, tc, in, tgt, &lc, err), "%s", err);
    REQUIRE(!gpt2_train_forward(&mg, tg, in, tgt, &lg, err), "%s", err);
    printf("  loss cpu %.7f gpu %.7f\n", lc, lg);
    CHECK_MSG(fabs(lg - lc) <= 1e-5 * fabs(lc), "loss %.7f vs %.7f", lg, lc); // ~6 nats, f32
    gpt2_train_backward(&mc, tc);
    gpt2_train_backward(&mg, tg);
    float *gc = fetch(g_cpu, gpt2_train_grads(tc), P), *gg = fetch(g_gpu, gpt2_train_grads(tg), P);
    compare_grads(&c, gc, gg, TOL_F32_LONG);
    // the same step again gives the same bits (--resume continues a run exactly): no
    // reduction may depend on the order threads arrive in (99 rows over 301 tokens repeat)
    gpt2_train_zero_grad(tg);
    REQUIRE(!gpt2_train_forward(&mg, tg, in, tgt, &lg, err), "%s", err);
    gpt2_train_backward(&mg, tg);
    float *gg2 = fetch(g_gpu, gpt2_train_grads(tg), P);
    CHECK_MSG(!memcmp(gg, gg2, P * sizeof *gg), "a repeated training step's gradients differ");
    free(gg2);
    free(gc);
    free(gg);
    // AdamW steps over the whole parameter buffer
    float *mc_m = g_cpu->ops->alloc(g_cpu, P * 4), *mc_v = g_cpu->ops->alloc(g_cpu, P * 4);
    float *mg_m = g_gpu->ops->alloc(g_gpu, P * 4), *mg_v = g_gpu->ops->alloc(g_gpu, P * 4);
    REQUIRE(mc_m && mc_v && mg_m && mg_v, "alloc");
    for (int step = 1; step <= 3; step++) {
        KgAdamWStep a = kg_adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, (uint64_t)step);
        if (step > 1) {
            gpt2_train_zero_grad(tc);
            gpt2_train_zero_grad(tg);
            REQUIRE(!gpt2_train_forward(&mc, tc, in, tgt, &lc, err), "%s", err);
            REQUIRE(!gpt2_train_forward(&mg, tg, in, tgt, &lg, err), "%s", err);
            gpt2_train_backward(&mc, tc);
            gpt2_train_backward(&mg, tg);
            printf("  step %d loss cpu %.7f gpu %.7f\n", step, lc, lg);
            // Adam normalizes each update to ~lr, so tiny gradient differences move the
            // parameters by up to lr: the loss agrees to ~1e-4 after a few steps
            CHECK_MSG(fabs(lg - lc) <= 1e-4 * fabs(lc), "step %d loss %.7f vs %.7f", step, lg, lc);
        }
        g_cpu->ops->adamw_update(g_cpu, mc.params, gpt2_train_grads(tc), mc_m, mc_v, P, &a);
        g_gpu->ops->adamw_update(g_gpu, mg.params, gpt2_train_grads(tg), mg_m, mg_v, P, &a);
    }
    float *pc = fetch(g_cpu, mc.params, P), *pg = fetch(g_gpu, mg.params, P);
    // Adam's step on a coordinate is about lr (|m^| / sqrt(v^) stays below ~1.2 here) whatever
    // the gradient's size, so a coordinate whose gradient is pure rounding noise (the key bias:
    // softmax ignores a shift shared by a row's scores) may move +lr on one side and -lr on
    // the other: up to ~2.4 lr per step, 3 steps, relative to the largest parameter (1, the
    // LN weights). The loss checks above are the tight ones.
    compare_host("params after 3 AdamW steps", pg, pc, P, 1e-2);
    free(pc);
    free(pg);
    // mixed bf16 on the GPU: the same loss within bf16's precision
    g_gpu->mixed = KG_BF16;
    float lm;
    REQUIRE(!gpt2_train_forward(&mg, tg, in, tgt, &lm, err), "%s", err);
    g_gpu->mixed = KG_F32;
    REQUIRE(!gpt2_train_forward(&mc, tc, in, tgt, &lc, err), "%s", err);
    printf("  mixed bf16 loss %.5f vs f32 cpu %.5f\n", lm, lc);
    CHECK_MSG(fabs(lm - lc) <= 1e-2 * fabs(lc), "mixed bf16 loss %.5f vs %.5f", lm, lc);
    g_cpu->ops->free(g_cpu, mc_m);
    g_cpu->ops->free(g_cpu, mc_v);
    g_gpu->ops->free(g_gpu, mg_m);
    g_gpu->ops->free(g_gpu, mg_v);
    gpt2_train_free(tc);
    gpt2_train_free(tg);
    gpt2_close(&mc);
    gpt2_close(&mg);
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

// test_cuda_ops            every op, then the whole model at a small shape
// test_cuda_ops kogpt2     the whole model at the KoGPT2-base shape, f32, f16 and bf16 weights
// test_cuda_ops fault      an injected kernel fault (leaves the GPU context unusable)
// test_cuda_ops attention  the attention ops alone (quick under compute-sanitizer racecheck)
int main(int argc, char **argv) {
    char why[256] = "", err[KG_ERRLEN];
    const char *mode = argc > 1 ? argv[1] : "ops";
    if (kg_cuda_device_count(why, sizeof why) <= 0) SKIP("no CUDA device (%s)", why);
    printf("%s\n", why);
    REQUIRE(g_cpu = kg_cpu_backend_new(0, err), "%s", err);
    REQUIRE(g_gpu = kg_cuda_backend_new(0, err), "%s", err);
    printf("cpu: %s, gpu: %s\n", g_cpu->ops->name, g_gpu->ops->name);
    REQUIRE(mkdtemp(g_dir), "mkdtemp %s", g_dir);
    if (!strcmp(mode, "fault")) {
        test_fault();
    } else if (!strcmp(mode, "attention")) {
        test_attention();
    } else if (!strcmp(mode, "kogpt2")) {
        test_forward_dtypes((TestModelSpec){
            .L = 12, .C = 768, .NH = 12, .T = 1024, .V = 51200, .wte_std = 0.1f, .seed = 11});
    } else {
        REQUIRE(!strcmp(mode, "ops"), "unknown mode %s (ops, attention, kogpt2, fault)", mode);
        test_encoder();
        test_layernorm();
        test_matmul();
        test_attention();
        test_elementwise();
        test_crossentropy();
        test_adamw();
        test_topk();
        test_forward_dtypes((TestModelSpec){
            .L = 2, .C = 64, .NH = 4, .T = 96, .V = 301, .wte_std = 0.5f, .seed = 7});
        test_train(GPT2_GELU_TANH);
        test_train(GPT2_GELU_ERF);
    }
    // no op met a CUDA or cuBLAS failure along the way (they return nothing; status says)
    if (strcmp(mode, "fault"))
        CHECK_MSG(g_gpu->ops->status(g_gpu, err) == KG_OK, "the GPU backend failed: %s", err);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    kg_backend_free(g_cpu);
    kg_backend_free(g_gpu);
    return check_report();
}
