// test_cuda_model.c — the whole model on the CUDA backend against the CPU backend: forward
// logits (prefill, token-by-token decode with the KV cache, a mixed batch, a copied cache) in
// f32, f16 and bf16 weights; training gradients and a few AdamW steps, both GELUs.
// test_cuda_ops.c checks each op alone. Errors and tolerances: cuda_test.h.
//
// Usage: test_cuda_model [small|kogpt2]   (ctest label "gpu"; without a usable GPU it prints
// "SKIP: no CUDA device (why)" and exits 77)
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_test.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "testmodel.h"

static char g_dir[] = "/tmp/test_cuda_model.XXXXXX"; // the test models' directories

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

// test_cuda_model         the forward at a small shape, then training
// test_cuda_model kogpt2  the forward at the KoGPT2-base shape, f32, f16 and bf16 weights
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "small";
    cuda_test_open();
    REQUIRE(mkdtemp(g_dir), "mkdtemp %s", g_dir);
    if (!strcmp(mode, "kogpt2")) {
        test_forward_dtypes((TestModelSpec){
            .L = 12, .C = 768, .NH = 12, .T = 1024, .V = 51200, .wte_std = 0.1f, .seed = 11});
    } else {
        REQUIRE(!strcmp(mode, "small"), "unknown mode %s (small, kogpt2)", mode);
        test_forward_dtypes((TestModelSpec){
            .L = 2, .C = 64, .NH = 4, .T = 96, .V = 301, .wte_std = 0.5f, .seed = 7});
        test_train(GPT2_GELU_TANH);
        test_train(GPT2_GELU_ERF);
    }
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    cuda_test_close(0);
    return check_report();
}
