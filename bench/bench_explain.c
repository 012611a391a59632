// bench_explain — what the lens and the attention view (model/gpt2_capture.h) add to one
// /v1/next-token answer, in the model alone (no HTTP, no JSON; bench/bench_explain.py measures
// the daemon end to end). Figures only.
//
//   bench_explain MODEL_DIR [--tokens N] [--rounds R] [--threads T]
//
// Per round, in turn (the same N-token prompt, fed in passes of 256 rows as kogpt2d does):
//   cold plain       the prompt's passes, the last row's logits
//   cold lens        the same with the lens captured, then gpt2_capture_lens (top 5, 10 tracked)
//   cold attention   the same with the attention of the last position, then
//                    gpt2_capture_attention
//   cold both        both
//   warm plain       the last token alone on the others' shared blocks (a cached prefix)
//   warm lens        the same with the lens (a lens request on a prompt the cache holds)
// Printed: the median of each, its extra over the plain one of its kind (cold or warm), and the
// median of the per-round differences (the same round's plain: slow drifts of a shared machine
// cancel).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "bench_util.h"
#include "model/gpt2.h"
#include "model/gpt2_capture.h"

#define PASS_ROWS  256 // kogpt2d's prefill chunk
#define N_KINDS    6
#define MAX_ROUNDS 64

static const char *const KIND_NAMES[N_KINDS] = {"cold plain",     "cold lens",  "cold attention",
                                                "cold lens+attn", "warm plain", "warm lens"};

// One request of kind k on tokens (n): its milliseconds. warm is a cache of the first n - 1.
static double one(const Gpt2 *m, Gpt2State *s, KvSeq *kv, const KvSeq *warm, const int *tokens,
                  size_t n, int k, char *err) {
    const int lens = k == 1 || k == 3 || k == 5, attention = k == 2 || k == 3;
    const size_t L = m->config.n_layer, NH = m->config.n_head;
    float *att = attention ? malloc(L * NH * n * sizeof *att) : NULL;
    Gpt2Capture c;
    Gpt2Capture *const caps[1] = {&c};
    double t0 = kg_now_s();
    int rc = lens || attention ? gpt2_capture_init(&c, m, lens, n - 1, attention, n - 1, err) : 0;
    s->captures = lens || attention ? caps : NULL;
    if (!rc && k >= 4) { // warm: the last token on the cached others, shared as the engine does
        kv_seq_truncate(kv, 0);
        kv_seq_fork(kv, warm, n - 1);
        Gpt2Seq q = {.kv = kv, .tokens = tokens + n - 1, .n = 1, .logits = GPT2_LOGITS_LAST};
        if (!rc) rc = gpt2_forward(m, s, &q, 1, err);
    } else if (!rc) {
        kv_seq_truncate(kv, 0);
        rc = gpt2_prefill(m, s, kv, tokens, n, 1, err);
    }
    s->captures = NULL;
    int tracked[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    Gpt2Lens l = {0};
    if (!rc && lens) rc = gpt2_capture_lens(m, &c, m->config.vocab_size, 5, tracked, 10, &l, err);
    if (!rc && attention) rc = gpt2_capture_attention(m, &c, att, err);
    double ms = (kg_now_s() - t0) * 1e3;
    gpt2_lens_free(&l);
    if (lens || attention) gpt2_capture_free(&c, m);
    free(att);
    return rc ? -1 : ms;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    long n = 512, rounds = 5, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atol(argv[++i]);
        else
            dir = argv[i];
    }
    if (!dir || n < 2 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: bench_explain MODEL_DIR [--tokens N] [--rounds 1..%d] "
                "[--threads T]\n",
                MAX_ROUNDS);
        return 2;
    }
    char err[KG_ERRLEN];
    KgBackend *be = kg_cpu_backend_new((int)threads, err);
    Gpt2 m;
    Gpt2State s;
    if (!be || gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err) ||
        gpt2_state_init(&s, &m, PASS_ROWS, 1, err)) {
        fprintf(stderr, "bench_explain: %s\n", err);
        return 1;
    }
    if ((size_t)n > m.config.n_ctx) n = (long)m.config.n_ctx;
    int *tokens = malloc((size_t)n * sizeof *tokens);
    uint64_t seed = 36;
    for (long i = 0; i < n; i++)
        tokens[i] = (int)(bench_rand(&seed) % m.config.vocab_size);
    KvPool *pool; // both sequences on one pool (a context each and a block to copy)
    KvSeq kv, warm;
    if (kv_pool_new(&pool, &m.config, be, 2 * kv_blocks_for(m.config.n_ctx) + 1, 0, err) ||
        kv_seq_init(&kv, pool, err) || kv_seq_init(&warm, pool, err) ||
        gpt2_prefill(&m, &s, &warm, tokens, (size_t)n - 1, 0, err)) {
        fprintf(stderr, "bench_explain: %s\n", err);
        return 1;
    }
    printf("%s: L%zu C%zu NH%zu V%zu, %ld tokens, %ld threads (%s), %ld rounds\n", dir,
           m.config.n_layer, m.config.n_embd, m.config.n_head, m.config.vocab_size, n, threads,
           be->ops->name, rounds);
    static double t[N_KINDS][MAX_ROUNDS];
    for (long r = 0; r < rounds; r++) {
        printf("round %ld:", r + 1);
        for (int k = 0; k < N_KINDS; k++) {
            t[k][r] = one(&m, &s, &kv, &warm, tokens, (size_t)n, k, err);
            if (t[k][r] < 0) {
                fprintf(stderr, "bench_explain: %s\n", err);
                return 1;
            }
            printf(" %s %.0f ms%s", KIND_NAMES[k], t[k][r], k + 1 < N_KINDS ? "," : "\n");
            fflush(stdout);
        }
    }
    double med[N_KINDS], diff[N_KINDS], d[MAX_ROUNDS];
    for (int k = 0; k < N_KINDS; k++) {
        int b = k < 4 ? 0 : 4;
        for (long r = 0; r < rounds; r++)
            d[r] = t[k][r] - t[b][r];
        diff[k] = bench_median(d, (size_t)rounds);
    }
    for (int k = 0; k < N_KINDS; k++)
        med[k] = bench_median(t[k], (size_t)rounds);
    printf("\n%-16s %10s %12s %8s %16s\n", "kind", "median ms", "extra ms", "ratio",
           "paired extra ms");
    for (int k = 0; k < N_KINDS; k++) {
        double base = med[k < 4 ? 0 : 4];
        if (k == 0 || k == 4)
            printf("%-16s %10.1f %12s %8s %16s\n", KIND_NAMES[k], med[k], "-", "-", "-");
        else
            printf("%-16s %10.1f %+12.1f %8.3f %+16.1f\n", KIND_NAMES[k], med[k], med[k] - base,
                   med[k] / base, diff[k]);
    }
    free(tokens);
    kv_seq_release(&kv);
    kv_seq_release(&warm);
    kv_pool_free(pool);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    kg_backend_free(be);
    return 0;
}
