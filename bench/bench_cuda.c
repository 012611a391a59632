// bench_cuda — the CUDA backend's speed: prefill and decode on the KoGPT2-base shape
// (random weights, f32 and f16), and the training step time and MFU of a small config
// (f32 and mixed bf16).
//
//   build/bench_cuda [--device N] [--dir /tmp/kg-bench-cuda] [--peak-tflops F32,BF16]
//
// Prints, per dtype: prefill tok/s for 64 and 512 tokens, decode tok/s over 128 steps after a
// 64-token prompt and the fraction of the GPU's memory bandwidth that decode reaches; per
// precision: the step time of B x T tokens and the model FLOPs utilization (6 FLOPs per
// parameter per token plus causal attention's 6 L C T, over the peak of the math it runs in:
// non-tensor f32, or bf16 tensor cores). Peaks come from a table of known GPUs or
// --peak-tflops. Figures only; exits 77 without a GPU.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt2.h"
#include "model/kg.h"

#include "bench_speeds.h"
#include "bench_util.h"
#include "tests/testmodel.h"

// Dense peaks in TFLOP/s (f32 without tensor cores, bf16 tensor cores) and memory GB/s.
typedef struct {
    const char *name_has;
    double f32, bf16, gbps;
} GpuPeak;

static const GpuPeak PEAKS[] = {
    {"H200", 67.0, 989.0, 4800.0},      {"H100 80GB HBM3", 67.0, 989.0, 3350.0},
    {"H100 PCIe", 51.0, 756.0, 2000.0}, {"H100", 67.0, 989.0, 3350.0},
    {"A100", 19.5, 312.0, 2039.0},      {"L40S", 91.6, 362.0, 864.0},
};

// Seconds per optimizer step (zero, forward, backward, AdamW over every parameter) of
// B x T tokens on config c, best of a few after a warm-up.
static int run_train(KgBackend *be, const Gpt2Config *c, size_t B, size_t T, double *sec,
                     char *err) {
    Gpt2 m;
    int rc = gpt2_train_model_new(&m, c, NULL, be, 1, err);
    if (rc) return rc;
    const size_t P = gpt2_param_count(c), N = B * T;
    Gpt2Train *t = gpt2_train_new(&m, B, T, 0, err);
    float *mom = be->ops->alloc(be, P * sizeof(float)),
          *var = be->ops->alloc(be, P * sizeof(float));
    int *in = malloc(N * sizeof *in), *tgt = malloc(N * sizeof *tgt);
    rc = KG_ENOMEM;
    if (!t || !mom || !var || !in || !tgt) {
        kg_err(err, rc, "train: out of memory");
        goto end;
    }
    uint64_t rng = 3;
    for (size_t i = 0; i < N; i++) {
        in[i] = (int)(bench_rand(&rng) % c->vocab_size);
        tgt[i] = (int)(bench_rand(&rng) % c->vocab_size);
    }
    *sec = 1e30;
    for (int step = 1; step <= 6; step++) { // step 1 warms up
        KgAdamWStep a = kg_adamw_step(1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, (uint64_t)step);
        float loss;
        double t0 = bench_now();
        gpt2_train_zero_grad(t);
        if ((rc = gpt2_train_forward(&m, t, in, tgt, &loss, err))) goto end;
        gpt2_train_backward(&m, t);
        be->ops->adamw_update(be, m.params, gpt2_train_grads(t), mom, var, P, &a);
        be->ops->synchronize(be);
        double dt = bench_now() - t0;
        if (step > 1 && dt < *sec) *sec = dt;
    }
    rc = KG_OK;
end:
    free(in);
    free(tgt);
    if (mom) be->ops->free(be, mom);
    if (var) be->ops->free(be, var);
    gpt2_train_free(t);
    gpt2_close(&m);
    return rc;
}

int main(int argc, char **argv) {
    int device = 0;
    const char *dir = "/tmp/kg-bench-cuda";
    double peak_f32 = 0, peak_bf16 = 0;
    static const struct option opts[] = {
        {"device", 1, 0, 'g'}, {"dir", 1, 0, 'o'}, {"peak-tflops", 1, 0, 'p'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'g')
            device = atoi(optarg);
        else if (o == 'o')
            dir = optarg;
        else if (o == 'p' && sscanf(optarg, "%lf,%lf", &peak_f32, &peak_bf16) == 2)
            continue;
        else {
            fprintf(stderr, "see the header of bench/bench_cuda.c\n");
            return 2;
        }
    }
    char why[256], err[KG_ERRLEN];
    if (kg_cuda_device_count(why, sizeof why) <= 0) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    KgBackend *be = kg_cuda_backend_new(device, err);
    if (!be) {
        fprintf(stderr, "bench_cuda: %s\n", err);
        return 1;
    }
    double gbps = 0;
    for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(be->ops->name, PEAKS[i].name_has)) {
            peak_f32 = peak_f32 > 0 ? peak_f32 : PEAKS[i].f32;
            peak_bf16 = peak_bf16 > 0 ? peak_bf16 : PEAKS[i].bf16;
            gbps = PEAKS[i].gbps;
            break;
        }
    printf("%s (%s); peaks f32 %.1f, bf16 %.1f TFLOP/s, %.0f GB/s%s\n", be->ops->name, why,
           peak_f32, peak_bf16, gbps, peak_f32 > 0 ? "" : " (unknown GPU: --peak-tflops)");

    TestModelSpec sh = {.L = 12, .C = 768, .NH = 12, .T = 1024, .V = 51200};
    printf("inference: KoGPT2-base shape L=%zu C=%zu NH=%zu T=%zu V=%zu\n", sh.L, sh.C, sh.NH, sh.T,
           sh.V);
    const char *names[2] = {"f32", "f16"};
    const KgDtype kinds[2] = {KG_F32, KG_F16};
    int rc = 0;
    for (int d = 0; d < 2 && !rc; d++) {
        char mdir[600];
        snprintf(mdir, sizeof mdir, "%s-%s", dir, names[d]);
        sh.dtype = kinds[d];
        BenchSpeeds sp;
        size_t wbytes = 0;
        // warm-up with 512 tokens: cuBLAS picks its kernels, staging and scratch reach size
        if ((rc = testmodel_write(mdir, &sh, err)) ||
            (rc = bench_speeds(be, mdir, 512, &sp, &wbytes, err)))
            break;
        printf(
            "%-4s prefill64 %.0f tok/s  prefill512 %.0f tok/s  decode %.1f tok/s (%.0f MB/token, "
            "%.0f%% of %.0f GB/s)\n",
            names[d], sp.prefill64, sp.prefill512, sp.decode, wbytes / 1e6,
            gbps > 0 ? 100.0 * sp.decode * (double)wbytes / (gbps * 1e9) : 0.0, gbps);
    }

    Gpt2Config c = gpt2_config_shape(6, 512, 8, 256, 51200);
    const size_t B = 8, T = 256, P = gpt2_param_count(&c);
    // training FLOPs per token: 6 per parameter (forward 2, backward 4; the tied wte counts
    // once, as the LM head) plus attention's q.k and p.v over T/2 positions on average:
    // 2 x 2 L C T/2 forward, twice that backward
    double flops = (6.0 * (double)P + 12.0 * c.n_layer * c.n_embd * T / 2.0) * (double)(B * T);
    printf("training: L=%zu C=%zu NH=%zu V=%zu, B=%zu T=%zu, %.1fM parameters\n", c.n_layer,
           c.n_embd, c.n_head, c.vocab_size, B, T, P / 1e6);
    const KgDtype mixes[2] = {KG_F32, KG_BF16};
    for (int i = 0; i < 2 && !rc; i++) {
        be->mixed = mixes[i];
        double sec;
        if ((rc = run_train(be, &c, B, T, &sec, err))) break;
        double peak = (i ? peak_bf16 : peak_f32) * 1e12;
        printf("%-4s step %.1f ms  %.0f tok/s  %.1f TFLOP/s  MFU %.1f%%\n", i ? "bf16" : "f32",
               sec * 1e3, (double)(B * T) / sec, flops / sec / 1e12,
               peak > 0 ? 100.0 * flops / sec / peak : 0.0);
    }
    if (rc) fprintf(stderr, "bench_cuda: %s\n", err);
    kg_backend_free(be);
    return rc ? 1 : 0;
}
