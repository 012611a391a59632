// test_gpt2_kv_dtype.c — each KV cache dtype of the CPU backend (--kv-dtype) against references
// with the keys and values held in that dtype (tests/ref/kv_dtype_ref.py: rounded to nearest
// even by numpy's float16 and torch's bfloat16, ggml's q8_0 blocks by quant_ref.py), on every
// ISA this processor has:
//   (a) the ops alone: kv_store of exact float32 keys and values into a paged pool, then
//       attention_forward over three sequences (a 17-row prefill, a decode row at position 29,
//       a 33-row chunk after 5 cached positions), against float64 attention on the same
//       rounded values;
//   (b) a whole model: a 40-token prefill in one forward (the sgemm path gathers rows from
//       three blocks) and token-by-token decode (the row loop reads runs of one block),
//       against gpt2_ref.py's forward with each layer's keys and values rounded.
// And the other way round: a rounded cache is far from the f32 reference (the rounding is
// really there).
//
// Usage: test_gpt2_kv_dtype DIR (kv_dtype_ref.py's output; 77 when it is absent).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "gpt2_ref.h"
#include "model/gpt2.h"

// (a) float32 attention against float64 on the same rounded keys and values: outputs are
// weighted means of values of magnitude ~1, over at most 38 keys.
#define OP_TOL 2e-5
// (b) The model's float32 keys and values lie a few 1e-7 (relative) from the reference's
// float64 ones, so now and then one sits that close to a rounding boundary and rounds the
// other way: one f16 or bf16 step (2^-11, 2^-8 relative) or one q8_0 step (a block's max / 127)
// in a key moves the log-probs by up to these (seen: f16 3.2e-4 in a Release build and 6.4e-4,
// two such flips, in the Debug + ASan one, whose sums round differently; bf16 1.6e-3, q8_0
// 1.0e-2; f32 1.5e-5). The rounding itself moves them by 2.9e-3, 2.5e-2 and 8.9e-2
// (kv_dtype_ref.py prints it): at least 3x each tolerance, checked below.
static const double MODEL_TOL[] = {1e-4, 9e-4, 4e-3, 2.5e-2};

static const KgDtype DTYPES[] = {KG_F32, KG_F16, KG_BF16, KG_Q8_0};
static const char *const NAMES[] = {"f32", "f16", "bf16", "q8_0"};
static const char *const ISAS[] = {"avx512bf16", "avx512vnni", "avx512", "avx2", "generic"};

// --- (a) the ops alone ---

#define ATTN_MAGIC 0x414B474Bu // "KGKA"

typedef struct {
    unsigned NH, hs, n_seq;
    unsigned pos0[8], n[8];
    float *q[8], *k[8], *v[8]; // (n, C), (pos0 + n, C) each
    float *out[4];             // per dtype: (sum n, C)
    size_t N;
} AttnRef;

static int attn_load(AttnRef *a, const char *path) {
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    uint32_t h[6];
    int ok = f && fread(h, 4, 6, f) == 6 && h[0] == ATTN_MAGIC && h[1] == 1 && h[4] <= 8;
    if (ok) a->NH = h[2], a->hs = h[3], a->n_seq = h[4];
    for (unsigned i = 0; ok && i < a->n_seq; i++) {
        ok = fread(&a->pos0[i], 4, 1, f) == 1 && fread(&a->n[i], 4, 1, f) == 1 &&
             a->pos0[i] + a->n[i] <= 64;
        a->N += a->n[i];
    }
    const size_t C = (size_t)a->NH * a->hs;
    for (unsigned i = 0; ok && i < a->n_seq; i++) {
        size_t Tk = a->pos0[i] + a->n[i];
        a->q[i] = malloc(a->n[i] * C * 4);
        a->k[i] = malloc(Tk * C * 4);
        a->v[i] = malloc(Tk * C * 4);
        ok = a->q[i] && a->k[i] && a->v[i] && fread(a->q[i], 4, a->n[i] * C, f) == a->n[i] * C &&
             fread(a->k[i], 4, Tk * C, f) == Tk * C && fread(a->v[i], 4, Tk * C, f) == Tk * C;
    }
    for (int d = 0; ok && d < 4; d++)
        ok = (a->out[d] = malloc(a->N * C * 4)) && fread(a->out[d], 4, a->N * C, f) == a->N * C;
    ok = ok && fgetc(f) == EOF;
    if (f) fclose(f);
    return ok ? 0 : -1;
}

static void attn_free(AttnRef *a) {
    for (unsigned i = 0; i < 8; i++)
        free(a->q[i]), free(a->k[i]), free(a->v[i]);
    for (int d = 0; d < 4; d++)
        free(a->out[d]);
}

// The largest |got - want| over n floats (a NaN sticks).
static double max_abs(const float *got, const float *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        worst = d > worst || d != d ? d : worst;
    }
    return worst;
}

// kv_store then attention_forward on isa with KV dtype d: the distance from reference d, and
// from the f32 one (*vs_f32).
static double run_ops(const AttnRef *a, const char *isa, size_t d, double *vs_f32) {
    char err[KG_ERRLEN];
    KgBackend *be = kg_cpu_backend_new_isa(2, isa, err);
    REQUIRE(be, "%s", err);
    be->kv_dtype = DTYPES[d];
    const size_t C = (size_t)a->NH * a->hs;
    Gpt2Config c = {.n_layer = 1, .n_head = a->NH, .n_embd = C, .n_ctx = 64};
    KvPool *pool;
    REQUIRE(!kv_pool_new(&pool, &c, be, 16, 0, err), "%s", err);
    KvSeq seq[8];
    KgAttnSeq at[8];
    float *q = malloc(a->N * C * sizeof *q), *out = malloc(a->N * C * sizeof *out);
    REQUIRE(q && out, "out of memory");
    static const int zeros[64];
    for (unsigned i = 0, row0 = 0; i < a->n_seq; row0 += a->n[i], i++) {
        size_t Tk = a->pos0[i] + a->n[i];
        REQUIRE(!kv_seq_init(&seq[i], pool, err) && !kv_seq_reserve(&seq[i], Tk, err), "%s", err);
        kv_seq_commit(&seq[i], zeros, Tk);
        KgAttnSeq all = {.row0 = 0, .n = Tk, .pos0 = 0}; // every position's keys and values
        kv_seq_attn(&seq[i], 0, &all);
        be->ops->kv_store(be, &all, 1, a->k[i], a->v[i], C, a->NH, a->hs);
        at[i] = (KgAttnSeq){.row0 = row0, .n = a->n[i], .pos0 = a->pos0[i]};
        kv_seq_attn(&seq[i], 0, &at[i]);
        memcpy(q + row0 * C, a->q[i], a->n[i] * C * sizeof *q);
    }
    be->ops->attention_forward(be, out, q, C, at, a->n_seq, a->NH, a->hs);
    double d_own = max_abs(out, a->out[d], a->N * C);
    *vs_f32 = max_abs(out, a->out[0], a->N * C);
    for (unsigned i = 0; i < a->n_seq; i++)
        kv_seq_release(&seq[i]);
    kv_pool_free(pool);
    free(q), free(out);
    kg_backend_free(be);
    return d_own;
}

// --- (b) a whole model ---

// Log-probs distance of dir's model with KV dtype dt on isa from r: a prefill of every token
// at once (*prefill) and one token at a time (*decode).
static void run(const char *dir, const char *isa, KgDtype dt, const Ref *r, double *prefill,
                double *decode) {
    char err[KG_ERRLEN];
    KgBackend *be = kg_cpu_backend_new_isa(2, isa, err);
    REQUIRE(be, "%s", err);
    be->kv_dtype = dt;
    Gpt2 m;
    REQUIRE(!gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err), "%s", err);
    const size_t n = (size_t)r->n, V = (size_t)r->V;
    Gpt2State s;
    KvSeq kv;
    REQUIRE(!gpt2_state_init(&s, &m, n, n, err) && !kv_init(&kv, &m, err), "%s", err);
    Gpt2Seq all = {&kv, r->tokens, n, GPT2_LOGITS_ALL};
    REQUIRE(!gpt2_forward(&m, &s, &all, 1, err), "%s", err);
    *prefill = logprob_diff(s.logits_host, r->logprobs, n, V);
    kv_seq_truncate(&kv, 0);
    *decode = 0;
    for (size_t i = 0; i < n; i++) {
        Gpt2Seq one = {&kv, r->tokens + i, 1, GPT2_LOGITS_LAST};
        REQUIRE(!gpt2_forward(&m, &s, &one, 1, err), "%s", err);
        double d = logprob_diff(s.logits_host, r->logprobs + i * V, 1, V);
        *decode = d > *decode || d != d ? d : *decode;
    }
    kv_free(&kv);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    kg_backend_free(be);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_gpt2_kv_dtype DIR\n");
        return 2;
    }
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/kv_dtype", argv[1]);
    Ref refs[4];
    for (size_t d = 0; d < 4; d++) {
        snprintf(path, sizeof path, "%s/ref_%s.bin", dir, NAMES[d]);
        if (ref_load(&refs[d], path))
            SKIP("%s is missing (run the kv_dtype_testdata fixture)", path);
    }
    AttnRef attn;
    snprintf(path, sizeof path, "%s/attn.bin", dir);
    REQUIRE(!attn_load(&attn, path), "%s: not kv_dtype_ref.py's attention reference", path);
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        char err[KG_ERRLEN];
        KgBackend *probe = kg_cpu_backend_new_isa(1, ISAS[i], err);
        if (!probe) continue; // this processor lacks the ISA
        kg_backend_free(probe);
        for (size_t d = 0; d < 4; d++) {
            double op_f32, op = run_ops(&attn, ISAS[i], d, &op_f32);
            printf("cpu-%-10s kv %-4s ops vs reference %.2e (tol %.0e)", ISAS[i], NAMES[d], op,
                   OP_TOL);
            CHECK_MSG(op <= OP_TOL, "%s kv %s: attention %.3g from its reference", ISAS[i],
                      NAMES[d], op);
            if (d) { // the rounding shows at the op too
                printf(", vs f32's %.2e", op_f32);
                CHECK_MSG(op_f32 > 10 * OP_TOL, "%s kv %s: attention within %.3g of f32", ISAS[i],
                          NAMES[d], op_f32);
            }
            double pre, dec, pre_f32, dec_f32;
            run(dir, ISAS[i], DTYPES[d], &refs[d], &pre, &dec);
            printf("; model: prefill %.2e decode %.2e (tol %.0e)", pre, dec, MODEL_TOL[d]);
            CHECK_MSG(pre <= MODEL_TOL[d] && dec <= MODEL_TOL[d], "%s kv %s: %.3g / %.3g", ISAS[i],
                      NAMES[d], pre, dec);
            if (d) { // a rounded cache is not an f32 one
                run(dir, ISAS[i], DTYPES[d], &refs[0], &pre_f32, &dec_f32);
                printf(", vs f32's %.2e", pre_f32);
                CHECK_MSG(pre_f32 > 3 * MODEL_TOL[d], "%s kv %s is within %.3g of f32", ISAS[i],
                          NAMES[d], pre_f32);
            }
            printf("\n");
        }
    }
    attn_free(&attn);
    for (size_t d = 0; d < 4; d++)
        ref_free(&refs[d]);
    return check_report();
}
