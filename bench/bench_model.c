// bench_model — prefill and decode speed of the CPU backend at a given GPT-2 shape, next to
// this machine's own memory bandwidth and peak FLOP/s measured in the same run.
//
//   build/bench_model [--layers 12 --embd 768 --heads 12 --ctx 1024 --vocab 51200]
//                     [--threads 1,2] [--dtypes f32,f16,bf16,q8_0,q4_0] [--precision bf16]
//                     [--dir /tmp/kg-bench]
//
// It writes a random checkpoint of the shape once per dtype (Hugging Face layout) and then
// prints, per dtype and thread count: the time of a 20-token prompt (next to its floor: the
// weights read once, or its FLOPs at peak), prefill tok/s for 64 and 512 tokens, decode tok/s over
// 128 steps after a 64-token prompt, the fraction of the memory roofline the decode reaches
// (weight bytes per token x tok/s / measured read bandwidth) and the fraction of peak FLOP/s
// the 512-token prefill reaches. --precision bf16 runs with bf16 matmul operands (kogpt2d's
// --precision bf16: every layer matmul rounds; prompts' in vdpbf16ps where the CPU has it,
// emulated elsewhere). Figures only: nothing here passes or fails.
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "base/kg.h"
#include "model/gpt2.h"
#include "model/kgmath.h"
#include "model/safetensors.h"

#include "bench_speeds.h"
#include "bench_util.h"
#include "tests/testmodel.h"

// The machine's limits with t threads, read again: best_bw[t] and best_peak[t] keep the best
// reading so far. Other tenants' load lowers a reading, never raises it, so the best is the
// closest to the machine's own limit and never flatters a fraction (a single low reading
// once put a decode at 135 % of "its" roofline).
static void read_limits(int t, double *best_bw, double *best_peak) {
    best_bw[t] = fmax(best_bw[t], bench_read_bandwidth(t));
    best_peak[t] = fmax(best_peak[t], bench_peak_flops(t));
}

// Whether the comma-separated list holds the word (strstr would find "f16" in "bf16").
static int list_has(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

// Splits "1,2" into ints.
static size_t parse_list(const char *s, int *out, size_t cap) {
    size_t n = 0;
    while (*s && n < cap) {
        out[n++] = atoi(s);
        s = strchr(s, ',');
        if (!s) break;
        s++;
    }
    return n;
}

int main(int argc, char **argv) {
    TestModelSpec sh = {.L = 12, .C = 768, .NH = 12, .T = 1024, .V = 51200};
    const char *dir = "/tmp/kg-bench", *dtypes = "f32,f16";
    KgDtype precision = KG_F32;
    char err[KG_ERRLEN];
    int threads[8] = {1, 2};
    size_t n_threads = 2;
    static const struct option opts[] = {{"layers", 1, 0, 'L'},    {"embd", 1, 0, 'C'},
                                         {"heads", 1, 0, 'H'},     {"ctx", 1, 0, 'T'},
                                         {"vocab", 1, 0, 'V'},     {"threads", 1, 0, 'j'},
                                         {"dtypes", 1, 0, 'd'},    {"dir", 1, 0, 'o'},
                                         {"precision", 1, 0, 'P'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'L':
            sh.L = (size_t)atol(optarg);
            break;
        case 'C':
            sh.C = (size_t)atol(optarg);
            break;
        case 'H':
            sh.NH = (size_t)atol(optarg);
            break;
        case 'T':
            sh.T = (size_t)atol(optarg);
            break;
        case 'V':
            sh.V = (size_t)atol(optarg);
            break;
        case 'j':
            n_threads = parse_list(optarg, threads, 8);
            break;
        case 'd':
            dtypes = optarg;
            break;
        case 'o':
            dir = optarg;
            break;
        case 'P':
            if (kg_precision_parse(optarg, &precision, err)) {
                fprintf(stderr, "bench_model: --precision: %s\n", err);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "see the header of bench/bench_model.c\n");
            return 2;
        }
    }
    printf("shape: L=%zu C=%zu NH=%zu T=%zu V=%zu, matmul operands %s\n", sh.L, sh.C, sh.NH, sh.T,
           sh.V, precision == KG_BF16 ? "bf16 (--precision bf16)" : "f32");
    int max_threads = 1;
    for (size_t i = 0; i < n_threads; i++) {
        if (threads[i] < 1 || threads[i] > 64) {
            fprintf(stderr, "bench_model: --threads takes 1 to 64\n");
            return 2;
        }
        max_threads = threads[i] > max_threads ? threads[i] : max_threads;
    }
    // read once here and again beside every configuration (read_limits)
    double best_bw[65] = {0}, best_peak[65] = {0};
    read_limits(1, best_bw, best_peak);
    if (max_threads > 1) read_limits(max_threads, best_bw, best_peak);
    printf("machine: read bandwidth %.1f GB/s (1 thread) %.1f GB/s (%d threads); peak %.1f "
           "GFLOP/s (1 thread) %.1f GFLOP/s (%d threads)\n",
           best_bw[1] / 1e9, best_bw[max_threads] / 1e9, max_threads, best_peak[1] / 1e9,
           best_peak[max_threads] / 1e9, max_threads);
    // q8_0 and q4_0 are the f32 checkpoint quantized at load (--dtype q8_0 / q4_0)
    const char *names[5] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    KgDtype kinds[5] = {KG_F32, KG_F16, KG_BF16, KG_Q8_0, KG_Q4_0};
    for (int d = 0; d < 5; d++) {
        if (!list_has(dtypes, names[d])) continue;
        const int quant = kg_dtype_quantized(kinds[d]);
        char mdir[600];
        snprintf(mdir, sizeof mdir, "%s-%s", dir, quant ? "f32" : names[d]);
        sh.dtype = quant ? KG_F32 : kinds[d];
        if (testmodel_write(mdir, &sh, err)) {
            fprintf(stderr, "bench_model: %s\n", err);
            return 1;
        }
        for (size_t ti = 0; ti < n_threads; ti++) {
            BenchSpeeds sp;
            size_t wbytes = 0;
            KgBackend *be = kg_cpu_backend_new(threads[ti], err);
            if (be) be->mixed = precision;
            // warm-up: 8 tokens touch every weight page once
            int rc = be ? bench_speeds_dtype(be, mdir, quant ? kinds[d] : KG_DTYPE_AUTO, 8, &sp,
                                             &wbytes, err)
                        : KG_ENOMEM;
            kg_backend_free(be);
            if (rc) {
                fprintf(stderr, "bench_model: %s\n", err);
                return 1;
            }
            read_limits(threads[ti], best_bw, best_peak);
            double bw = best_bw[threads[ti]], peak = best_peak[threads[ti]];
            // prefill FLOPs per token: 2 per weight of the layers (the LM head runs once per
            // prompt, for the last token only) plus attention's q.k and p.v at ~T/2 positions
            double layer_w = (double)sh.L * 12.0 * sh.C * sh.C;
            double flops512 = 2.0 * layer_w + 2.0 * 2.0 * sh.L * sh.C * 256.0;
            // a 20-token prompt can go no faster than reading the weights once or doing its
            // FLOPs (plus the LM head for the last token) at peak: whichever is slower
            double floor20 =
                fmax((double)wbytes / bw, (20.0 * 2.0 * layer_w + 2.0 * sh.V * sh.C) / peak) * 1e3;
            printf(
                "%-4s threads=%d  prefill20 %.1f ms (floor %.1f ms)  prefill64 %.1f tok/s  "
                "prefill512 %.1f tok/s (%.0f%% of f32 peak FLOP/s)  decode %.1f tok/s (%.0f%% of "
                "roofline: %.0f MB/token at %.1f GB/s)\n",
                names[d], threads[ti], sp.prefill20_ms, floor20, sp.prefill64, sp.prefill512,
                100.0 * sp.prefill512 * flops512 / peak, sp.decode,
                100.0 * sp.decode * (double)wbytes / bw, wbytes / 1e6, bw / 1e9);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS %.1f MB\n", ru.ru_maxrss / 1024.0);
    return 0;
}
