// test_gpt2_explain.c — the logit lens and the attention view (model/gpt2_capture.h) against a
// hand-written float64 PyTorch GPT-2 that returns what transformers' output_hidden_states and
// output_attentions give (tests/ref/explain_ref.py).
//
// Usage: test_gpt2_explain REF_DIR NAME=MODEL_DIR...   (REF_DIR/NAME.bin from explain_ref.py;
// skips with 77 when a reference or a model is absent)
//
// Per model, on the CPU backend, the prompt fed in passes of 7 rows (so every capture is put
// together from several passes):
//   (a) the lens at the last position: every stage's log-probs over the whole vocabulary (k = V)
//       vs the reference; top-10 ids identical where the reference's gaps are wider than the
//       tolerance; the ranks of the final top-10 at every stage; the stage where the final top-1
//       first is top-1 and its rank before;
//   (b) the lens's last stage is the forward's own answer, and a capture leaves the logits as
//       they are without one;
//   (c) the attention of the last position (captured with the lens) and of a middle position
//       (a second sequence in the same batches, with its own capture) vs the reference;
//   (d) a sequence started from a copied prefix has no keys for the attention view: refused.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "model/gpt2.h"
#include "model/gpt2_capture.h"
#include "model/logits.h"

#define REF_MAGIC   0x5845474Bu // "KGEX"
#define REF_VERSION 1u
#define PASS_ROWS   7 // rows per forward pass: a capture spans several

// The lens against the float64 reference computed from the same stored weights: what is left
// is our float32 arithmetic (test_gpt2_parity holds the model's logits to the same 1e-4).
#define LENS_TOL 1e-4
// Attention probabilities from float32 q and k (dots summed in double here): the reference's
// float64 softmax differs by the rounding of q and k, ~1e-6 at these shapes; 1e-5 stated.
#define ATT_TOL 1e-5
// Two of our own computations of the same logits that sum in another order (the lens's head
// over L + 1 rows vs the forward's over one): well under the tolerance against the reference.
#define SAME_TOL 5e-5

typedef struct {
    int L, C, NH, V, n, att_pos;
    int *tokens;     // (n)
    float *lens;     // (L + 1, V) log-probs at the last position
    float *att;      // (L, NH, att_pos + 1)
    float *att_last; // (L, NH, n)
} Ref;

static int ref_load(Ref *r, const char *path) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint32_t head[2];
    int32_t d[6];
    int ok = fread(head, 4, 2, f) == 2 && head[0] == REF_MAGIC && head[1] == REF_VERSION &&
             fread(d, 4, 6, f) == 6;
    if (ok) {
        r->L = d[0], r->C = d[1], r->NH = d[2], r->V = d[3], r->n = d[4], r->att_pos = d[5];
        ok = r->L > 0 && r->NH > 0 && r->V > 0 && r->n > r->att_pos && r->att_pos >= 0;
    }
    size_t nl = ok ? (size_t)(r->L + 1) * r->V : 0;
    size_t na = ok ? (size_t)r->L * r->NH * (r->att_pos + 1) : 0;
    size_t nz = ok ? (size_t)r->L * r->NH * r->n : 0;
    if (ok) {
        r->tokens = malloc((size_t)r->n * sizeof(int));
        r->lens = malloc(nl * sizeof(float));
        r->att = malloc(na * sizeof(float));
        r->att_last = malloc(nz * sizeof(float));
        ok = r->tokens && r->lens && r->att && r->att_last &&
             fread(r->tokens, 4, (size_t)r->n, f) == (size_t)r->n &&
             fread(r->lens, 4, nl, f) == nl && fread(r->att, 4, na, f) == na &&
             fread(r->att_last, 4, nz, f) == nz && fgetc(f) == EOF;
    }
    fclose(f);
    return ok ? 0 : -2;
}

static void ref_free(Ref *r) {
    free(r->tokens);
    free(r->lens);
    free(r->att);
    free(r->att_last);
}

// id's rank in row (V) by the reference's values, and how many others lie within tol of it
// (where the order may fairly differ).
static size_t ref_rank(const float *row, size_t V, int id, double tol, size_t *near) {
    size_t before = 0;
    *near = 0;
    for (size_t i = 0; i < V; i++) {
        before += row[i] > row[id];
        *near += (int)i != id && fabs(row[i] - row[id]) <= tol;
    }
    return before + 1;
}

// (a) the lens of stage rows against the reference's rows.
static void check_lens(const Ref *r, const Gpt2Lens *lens) {
    const size_t S = (size_t)r->L + 1, V = (size_t)r->V;
    double worst = 0;
    int top_ok = 1;
    for (size_t st = 0; st < S; st++) {
        const float *ref = r->lens + st * V;
        const KgCandidate *top = lens->top + st * V; // k = V: every token, best first
        for (size_t i = 0; i < V; i++) {
            double d = fabs(top[i].logprob - ref[top[i].id]);
            worst = d > worst ? d : worst;
        }
        for (size_t i = 0; i < 10; i++) { // identical where the reference's gap is clear
            size_t near, rk = ref_rank(ref, V, top[i].id, 2 * LENS_TOL, &near);
            if (!near && rk != i + 1) top_ok = 0;
        }
    }
    printf("  lens: %zu stages x %zu tokens, max |logprob - ref| %.2e (tol %.0e)\n", S, V, worst,
           LENS_TOL);
    CHECK_MSG(worst <= LENS_TOL, "lens log-probs off by %.3g", worst);
    CHECK_MSG(top_ok, "a stage's top-10 order differs from the reference's");
    // the final top-10 followed through the stages
    int rank_ok = 1;
    for (size_t st = 0; st < S; st++)
        for (size_t t = 0; t < lens->n_tracked; t++) {
            size_t near, rk = ref_rank(r->lens + st * V, V, lens->tracked[t], 2 * LENS_TOL, &near);
            size_t got = lens->rank[st * lens->n_tracked + t];
            double dl = fabs(lens->logprob[st * lens->n_tracked + t] -
                             r->lens[st * V + (size_t)lens->tracked[t]]);
            if ((got > rk ? got - rk : rk - got) > near || dl > LENS_TOL) rank_ok = 0;
        }
    CHECK_MSG(rank_ok, "a tracked token's rank or log-prob differs from the reference's");
    // where the final top-1 first became top-1, by the reference
    const float *last = r->lens + (S - 1) * V;
    size_t near, first = S - 1;
    CHECK(ref_rank(last, V, lens->final_id, 2 * LENS_TOL, &near) == 1 || near);
    for (size_t st = 0; st < S; st++)
        if (ref_rank(r->lens + st * V, V, lens->final_id, 0, &near) == 1) {
            first = st;
            break;
        }
    size_t before = first ? ref_rank(r->lens + (first - 1) * V, V, lens->final_id, 0, &near) : 0;
    printf("  lens: the final top-1 (id %d) is first top-1 at stage %zu (ref %zu), rank %zu "
           "before (ref %zu)\n",
           lens->final_id, lens->first_top_stage, first, lens->rank_before, before);
    CHECK(lens->first_top_stage == first);
    CHECK(lens->rank_before == before);
}

// (c) attention probabilities (L, NH, P) against the reference's.
static void check_attention(const char *what, const float *got, const float *ref, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        worst = d > worst ? d : worst;
    }
    printf("  attention %s: %zu probabilities, max |p - ref| %.2e (tol %.0e)\n", what, n, worst,
           ATT_TOL);
    CHECK_MSG(worst <= ATT_TOL, "attention %s off by %.3g", what, worst);
}

// Feeds the prompts of seqs (each its own tokens, n of them) in passes of PASS_ROWS rows per
// sequence; the last pass asks for logits. KG_OK or the forward's error.
static int feed(const Gpt2 *m, Gpt2State *s, Gpt2Seq *seqs, const int *const *tokens,
                const size_t *n, size_t n_seq) {
    char err[KG_ERRLEN];
    for (size_t done = 0;; done += PASS_ROWS) {
        int more = 0;
        for (size_t i = 0; i < n_seq; i++) {
            size_t left = n[i] > done ? n[i] - done : 0;
            seqs[i].tokens = tokens[i] + done;
            seqs[i].n = left < PASS_ROWS ? left : PASS_ROWS;
            seqs[i].logits = left <= PASS_ROWS && left ? GPT2_LOGITS_LAST : GPT2_LOGITS_NONE;
            more |= left > 0;
        }
        if (!more) return KG_OK;
        int rc = gpt2_forward(m, s, seqs, n_seq, err);
        if (rc) {
            fprintf(stderr, "forward: %s\n", err);
            return rc;
        }
    }
}

static void run_case(const char *ref_dir, const char *arg) {
    char name[64], path[2048], err[KG_ERRLEN];
    const char *eq = strchr(arg, '=');
    REQUIRE(eq && eq - arg < (long)sizeof name, "bad argument %s", arg);
    snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
    snprintf(path, sizeof path, "%s/%s.bin", ref_dir, name);
    Ref r;
    if (ref_load(&r, path)) SKIP("no reference %s (explain_ref.py writes it)", path);
    printf("%s: %s, %d tokens\n", name, eq + 1, r.n);
    KgBackend *be = kg_cpu_backend_new(2, err);
    REQUIRE(be, "%s", err);
    Gpt2 m;
    REQUIRE(!gpt2_open(&m, eq + 1, be, KG_DTYPE_AUTO, err), "%s", err);
    REQUIRE((int)m.config.n_layer == r.L && (int)m.config.vocab_size == r.V, "shape mismatch");
    Gpt2State s;
    REQUIRE(!gpt2_state_init(&s, &m, 2 * PASS_ROWS, 2, err), "%s", err);
    const size_t V = (size_t)r.V, n = (size_t)r.n, ap = (size_t)r.att_pos;
    const size_t nz = (size_t)r.L * r.NH * n, na = (size_t)r.L * r.NH * (ap + 1);

    // the prompt (its lens and attention at the last position) beside a second sequence, the
    // prompt up to the middle position (the attention of its last one), in the same batches:
    // first without captures (the plain answer), then with them
    // both on one pool (a context each and a block to copy), so that (d) can share a prefix
    KvPool *pool;
    KvSeq kv0, kv1;
    REQUIRE(!kv_pool_new(&pool, &m.config, be, 2 * kv_blocks_for(m.config.n_ctx) + 1, 0, err) &&
                !kv_seq_init(&kv0, pool, err) && !kv_seq_init(&kv1, pool, err),
            "%s", err);
    Gpt2Seq two[2] = {{.kv = &kv0}, {.kv = &kv1}};
    const int *toks[2] = {r.tokens, r.tokens};
    size_t lens_n[2] = {n, ap + 1};
    REQUIRE(!feed(&m, &s, two, toks, lens_n, 2), "plain forward");
    float *plain = malloc(V * sizeof *plain); // row 0 of the last pass: the prompt's last token
    memcpy(plain, s.logits_host, V * sizeof *plain);
    double lse = logits_logsumexp(plain, V, 1.0f);
    Gpt2Capture last, mid;
    REQUIRE(!gpt2_capture_init(&last, &m, 1, n - 1, 1, n - 1, err), "%s", err);
    REQUIRE(!gpt2_capture_init(&mid, &m, 0, 0, 1, ap, err), "%s", err);
    kv_seq_truncate(&kv0, 0);
    kv_seq_truncate(&kv1, 0);
    Gpt2Capture *const both[2] = {&last, &mid};
    s.captures = both;
    REQUIRE(!feed(&m, &s, two, toks, lens_n, 2), "forward with captures");
    double moved = 0;
    for (size_t i = 0; i < V; i++) // (b)
        moved = fmax(moved, fabs(s.logits_host[i] - plain[i]));
    CHECK_MSG(moved == 0, "a capture moved the logits by %.3g", moved);

    int tracked[10];
    KgCandidate best[10];
    logits_topk(plain, V, 1.0f, 10, best);
    for (int i = 0; i < 10; i++)
        tracked[i] = best[i].id;
    Gpt2Lens lens;
    REQUIRE(!gpt2_capture_lens(&m, &last, V, V, tracked, 10, &lens, err), "%s", err);
    check_lens(&r, &lens);
    double same = 0; // (b) the last stage is the forward's answer
    const KgCandidate *fin = lens.top + (size_t)r.L * V;
    for (size_t i = 0; i < V; i++)
        same = fmax(same, fabs(fin[i].logprob - (plain[fin[i].id] - lse)));
    printf("  lens: last stage vs the forward's log-probs %.2e (tol %.0e)\n", same, SAME_TOL);
    CHECK(same <= SAME_TOL);
    CHECK(lens.final_id == tracked[0] || fabs(best[0].logit - best[1].logit) < 1e-4);
    gpt2_lens_free(&lens);

    float *att = malloc(nz * sizeof *att);
    REQUIRE(att, "out of memory");
    REQUIRE(!gpt2_capture_attention(&m, &last, att, err), "%s", err);
    check_attention("of the last position", att, r.att_last, nz);
    REQUIRE(!gpt2_capture_attention(&m, &mid, att, err), "%s", err);
    check_attention("of a middle position, batched", att, r.att, na);

    // (d) a sequence that starts from a copied prefix: the lens works, the attention is refused
    Gpt2Capture gap;
    REQUIRE(!gpt2_capture_init(&gap, &m, 1, n - 1, 1, n - 1, err), "%s", err);
    kv_seq_truncate(&kv1, 0);
    kv_seq_fork(&kv1, &kv0, n - 1);
    Gpt2Seq tail = {.kv = &kv1, .tokens = r.tokens + n - 1, .n = 1, .logits = GPT2_LOGITS_LAST};
    Gpt2Capture *const alone[1] = {&gap};
    s.captures = alone;
    REQUIRE(!gpt2_forward(&m, &s, &tail, 1, err), "%s", err);
    s.captures = NULL;
    CHECK(gpt2_capture_attention(&m, &gap, att, err) == KG_EINVAL && strstr(err, "0.."));
    REQUIRE(!gpt2_capture_lens(&m, &gap, V, 5, tracked, 1, &lens, err), "%s", err);
    CHECK(lens.final_id == lens.top[(size_t)r.L * 5].id && lens.rank[(size_t)r.L] >= 1);
    gpt2_lens_free(&lens);
    Gpt2Capture none; // nothing asked, or a position past the context
    CHECK(gpt2_capture_init(&none, &m, 0, 0, 0, 0, err) == KG_EINVAL);
    CHECK(gpt2_capture_init(&none, &m, 1, m.config.n_ctx, 0, 0, err) == KG_EINVAL);

    gpt2_capture_free(&gap, &m);
    gpt2_capture_free(&last, &m);
    gpt2_capture_free(&mid, &m);
    free(att);
    free(plain);
    kv_seq_release(&kv0);
    kv_seq_release(&kv1);
    kv_pool_free(pool);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    kg_backend_free(be);
    ref_free(&r);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_gpt2_explain REF_DIR NAME=MODEL_DIR...\n");
        return 2;
    }
    for (int i = 2; i < argc; i++)
        run_case(argv[1], argv[i]);
    return check_report();
}
