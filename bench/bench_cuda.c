// bench_cuda — the CUDA backend's speed: prefill and decode on the KoGPT2-base shape
// (random weights, f32, f16 and bf16), batched decode, and the training step time and MFU
// (a small config, and the KoGPT2-base shape at B=8 T=1024, llm.c's GPT-2 124M setting).
//
//   build/bench_cuda [--device N] [--dir /tmp/kg-bench-cuda] [--peak-tflops F32,BF16]
//   ncu --profile-from-start off --metrics gpu__time_duration.sum --csv build/bench_cuda
//       --profile   (one f16 decode step and one bf16 training step of the KoGPT2-base shape
//                    between the profiler's marks: each kernel's time)
//
// Prints, per dtype: prefill tok/s for 64 and 512 tokens, decode tok/s over 128 steps after a
// 64-token prompt and the fraction of the GPU's memory bandwidth that decode reaches (one
// read of the weights per token); decode throughput with 8, 32 and 64 sequences stepping
// together (f16); per precision: the step time of B x T tokens and the model FLOPs
// utilization (6 FLOPs per parameter per token plus causal attention's 6 L C T, over the peak
// of the math it runs in: non-tensor f32, or bf16 tensor cores). Peaks come from a table of
// known GPUs or --peak-tflops. Figures only; exits 77 without a GPU.
#include <cuda_profiler_api.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "model/gpt2.h"

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
// B x T tokens on config c, best of a few after a warm-up; with profile, the last step runs
// between cudaProfilerStart and Stop.
static int run_train(KgBackend *be, const Gpt2Config *c, size_t B, size_t T, int profile,
                     double *sec, char *err) {
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
        if (profile && step == 6) cudaProfilerStart();
        double t0 = kg_now_s();
        gpt2_train_zero_grad(t);
        if ((rc = gpt2_train_forward(&m, t, in, tgt, &loss, err))) goto end;
        gpt2_train_backward(&m, t);
        be->ops->adamw_update(be, m.params, gpt2_train_grads(t), mom, var, P, &a);
        be->ops->synchronize(be);
        double dt = kg_now_s() - t0;
        if (profile && step == 6) cudaProfilerStop();
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

// Decode throughput of n_seq sequences stepping together: each has a 64-token prompt, then
// 128 steps of one token each for all of them in one forward (tokens/s over all sequences).
static int run_batched(KgBackend *be, const char *dir, size_t n_seq, double *tok_s, char *err) {
    Gpt2 m;
    Gpt2State s = {0};
    int rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    if (rc) return rc;
    KvSeq *kv = calloc(n_seq, sizeof *kv);
    Gpt2Seq *q = calloc(n_seq, sizeof *q);
    int *tok = calloc(n_seq * 192, sizeof *tok);
    size_t V = m.config.vocab_size;
    uint64_t rng = 5;
    rc = KG_ENOMEM;
    if (!kv || !q || !tok) goto end;
    for (size_t i = 0; i < n_seq * 192; i++)
        tok[i] = (int)(bench_rand(&rng) % V);
    if ((rc = gpt2_state_init(&s, &m, n_seq > 64 ? n_seq : 64, n_seq, err))) goto end;
    for (size_t i = 0; i < n_seq; i++)
        if ((rc = kv_init(&kv[i], &m, err)) ||
            (rc = gpt2_prefill(&m, &s, &kv[i], tok + i * 192, 64, 1, err)))
            goto end;
    double t0 = 0;
    for (int step = -8; step < 128; step++) { // 8 warm-up steps (cuBLAS picks its kernels)
        if (step == 0) t0 = kg_now_s();
        for (size_t i = 0; i < n_seq; i++)
            q[i] = (Gpt2Seq){&kv[i], &tok[i * 192 + 64 + (step + 8) % 128], 1, GPT2_LOGITS_LAST};
        if ((rc = gpt2_forward(&m, &s, q, n_seq, err))) goto end;
    }
    *tok_s = 128.0 * (double)n_seq / (kg_now_s() - t0);
end:
    for (size_t i = 0; kv && i < n_seq; i++)
        kv_free(&kv[i]);
    free(kv);
    free(q);
    free(tok);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    return rc;
}

// --profile: after warm-ups, one f16 decode step (64 tokens in the cache) and one mixed bf16
// training step (B=8, T=1024) of the KoGPT2-base shape between cudaProfilerStart and Stop, so
// that a profiler started with profiling off sees only those kernels.
static int run_profile(KgBackend *be, const char *dir, char *err) {
    char mdir[600];
    snprintf(mdir, sizeof mdir, "%s-f16", dir);
    TestModelSpec sh = {.L = 12, .C = 768, .NH = 12, .T = 1024, .V = 51200, .dtype = KG_F16};
    Gpt2 m;
    Gpt2State s = {0};
    KvSeq kv = {0};
    int tokens[80], rc;
    for (int i = 0; i < 80; i++)
        tokens[i] = i * 37 % 51200;
    if ((rc = testmodel_write(mdir, &sh, err)) ||
        (rc = gpt2_open(&m, mdir, be, KG_DTYPE_AUTO, err)))
        return rc;
    if (!(rc = gpt2_state_init(&s, &m, 64, 1, err)) && !(rc = kv_init(&kv, &m, err)) &&
        !(rc = gpt2_prefill(&m, &s, &kv, tokens, 64, 1, err)))
        for (int step = 0; step < 5 && !rc; step++) { // the last one profiled
            Gpt2Seq q = {&kv, &tokens[64 + step], 1, GPT2_LOGITS_LAST};
            if (step == 4) cudaProfilerStart();
            rc = gpt2_forward(&m, &s, &q, 1, err);
            if (step == 4) cudaProfilerStop();
        }
    kv_free(&kv);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    if (rc) return rc;
    Gpt2Config c = gpt2_config_shape(12, 768, 12, 1024, 51200);
    be->mixed = KG_BF16;
    double sec;
    rc = run_train(be, &c, 8, 1024, 1, &sec, err);
    be->mixed = KG_F32;
    return rc;
}

// One training configuration in f32 and mixed bf16.
static int report_train(KgBackend *be, Gpt2Config c, size_t B, size_t T, double peak_f32,
                        double peak_bf16, char *err) {
    const size_t P = gpt2_param_count(&c);
    // training FLOPs per token: 6 per parameter (forward 2, backward 4; the tied wte counts
    // once, as the LM head) plus attention's q.k and p.v over T/2 positions on average:
    // 2 x 2 L C T/2 forward, twice that backward
    double flops = (6.0 * (double)P + 12.0 * c.n_layer * c.n_embd * T / 2.0) * (double)(B * T);
    printf("training: L=%zu C=%zu NH=%zu V=%zu, B=%zu T=%zu, %.1fM parameters\n", c.n_layer,
           c.n_embd, c.n_head, c.vocab_size, B, T, P / 1e6);
    const KgDtype mixes[2] = {KG_F32, KG_BF16};
    for (int i = 0; i < 2; i++) {
        be->mixed = mixes[i];
        double sec;
        int rc = run_train(be, &c, B, T, 0, &sec, err);
        be->mixed = KG_F32;
        if (rc) return rc;
        double peak = (i ? peak_bf16 : peak_f32) * 1e12;
        printf("%-4s step %.1f ms  %.0f tok/s  %.1f TFLOP/s  MFU %.1f%%\n", i ? "bf16" : "f32",
               sec * 1e3, (double)(B * T) / sec, flops / sec / 1e12,
               peak > 0 ? 100.0 * flops / sec / peak : 0.0);
    }
    return KG_OK;
}

int main(int argc, char **argv) {
    int device = 0;
    const char *dir = "/tmp/kg-bench-cuda";
    double peak_f32 = 0, peak_bf16 = 0;
    static const struct option opts[] = {{"device", 1, 0, 'g'},
                                         {"dir", 1, 0, 'o'},
                                         {"peak-tflops", 1, 0, 'p'},
                                         {"profile", 0, 0, 'P'},
                                         {0, 0, 0, 0}};
    int profile = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'g')
            device = atoi(optarg);
        else if (o == 'o')
            dir = optarg;
        else if (o == 'P')
            profile = 1;
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

    if (profile) {
        int rc = run_profile(be, dir, err);
        if (rc) fprintf(stderr, "bench_cuda: %s\n", err);
        kg_backend_free(be);
        return rc ? 1 : 0;
    }
    TestModelSpec sh = {.L = 12, .C = 768, .NH = 12, .T = 1024, .V = 51200};
    printf("inference: KoGPT2-base shape L=%zu C=%zu NH=%zu T=%zu V=%zu\n", sh.L, sh.C, sh.NH, sh.T,
           sh.V);
    const char *names[3] = {"f32", "f16", "bf16"};
    int rc = 0;
    for (KgDtype d = KG_F32; d <= KG_BF16 && !rc; d++) {
        char mdir[600];
        snprintf(mdir, sizeof mdir, "%s-%s", dir, names[d]);
        sh.dtype = d;
        BenchSpeeds sp;
        size_t wbytes = 0;
        // warm-up with 512 tokens: cuBLAS picks its kernels, staging and scratch reach size
        if ((rc = testmodel_write(mdir, &sh, err)) ||
            (rc = bench_speeds(be, mdir, 512, &sp, &wbytes, err)))
            break;
        printf("%-4s prefill20 %.2f ms  prefill64 %.0f tok/s  prefill512 %.0f tok/s  decode %.1f "
               "tok/s (%.0f MB/token, %.0f%% of %.0f GB/s)\n",
               names[d], sp.prefill20_ms, sp.prefill64, sp.prefill512, sp.decode, wbytes / 1e6,
               gbps > 0 ? 100.0 * sp.decode * (double)wbytes / (gbps * 1e9) : 0.0, gbps);
        if (d != KG_F16) continue;
        const size_t batches[3] = {8, 32, 64};
        for (int b = 0; b < 3 && !rc; b++) {
            double tok_s = 0;
            if (!(rc = run_batched(be, mdir, batches[b], &tok_s, err)))
                printf("f16  batched decode, %2zu sequences: %.0f tok/s\n", batches[b], tok_s);
        }
    }
    if (!rc)
        rc = report_train(be, gpt2_config_shape(6, 512, 8, 256, 51200), 8, 256, peak_f32, peak_bf16,
                          err);
    if (!rc)
        rc = report_train(be, gpt2_config_shape(12, 768, 12, 1024, 51200), 8, 1024, peak_f32,
                          peak_bf16, err);
    if (rc) fprintf(stderr, "bench_cuda: %s\n", err);
    kg_backend_free(be);
    return rc ? 1 : 0;
}
