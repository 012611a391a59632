// bench_quant_quality — what q8_0 / q4_0 weights cost in quality (issue 16): bits per byte on
// real text and the Explorer's top-10, each dtype against f32, in one run. Prints figures.
//
//   build/bench_quant_quality [--model DIR] [--dtypes f32,f16,q8_0,q4_0,f32:kv=bf16] [--threads 2]
//                             [--seq 256] [--max-bytes N] [--check] TEXT...
//
// The first of --dtypes is the reference the others are compared with (f32: the stored f16
// widened at load; f16: as stored; q8_0/q4_0: quantized at load). A dtype with @bf16 runs
// with bf16 matmul operands (kogpt2d --precision bf16): f32@bf16, f16@bf16; one with :kv=K
// holds its KV cache in K (kogpt2d --kv-dtype: f16, bf16, q8_0): f32:kv=bf16. For each TEXT, bits
// per byte exactly as models/eval_bpb.sh (the trainer's validation) computes them: each line is a
// document (a trailing CR dropped, empty lines and invalid UTF-8 skipped), its tokens then EOS, all
// in one stream read as windows of SEQ + 1 tokens; every token after the first of a window is
// scored once with the tokens before it in the window as context; the tail that fills no window is
// not scored. bpb = mean nats per scored token / ln 2 x tokens / bytes, bytes counting each
// document and its newline. --max-bytes keeps the first documents that fit, so `head -n` of the
// same lines gives eval_bpb.sh the same text. Beside bpb, at every scored position: whether the
// top-1, the top-10 set, at least 9 of the top-10 and the ordered top-10 equal the reference's, and
// KL(reference || dtype). Then the same agreement at every position of the model card's ten prompts
// (the first is the Explorer's placeholder), which is what the Explorer shows: a prompt's top-10,
// and each of its tokens ranked in that position's list.
//
// The held-out text and the unseen text of models/default/README.md, byte for byte: the
// trainer's prepare of models/train_default.sh (step 2) writes the held-out documents to
// /tmp/split/val_000000.txt, and models/make_unseen.sh the unseen ones:
//   C=../shared/data/corpora
//   build/kogpt2-train prepare --tokenizer models/default/kogpt2-default.model
//     --input $C/nsmc/nsmc_raw_reviews.tsv.gz --input $C/boddari --input $C/debian_ko
//     --input $C/chatbot_data/ChatbotData.csv --out /tmp/split --val-every-doc 100
//   models/make_unseen.sh > /tmp/unseen.txt
//
// --check (tests/test_gpt2_quant_quality.sh) exits 1 unless, on every text, q8_0's bits per
// byte are within 1 % of the reference's and q4_0's within 5 % (issue 16's targets).
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"

#include "bench_util.h"

#define TOPK       10
#define MAX_DTYPES 8

// The model card's ten prompts (models/default/README.md, "What it says").
static const char *const PROMPTS[] = {
    "여러분 2019년 수고하셨습니다. 올해에는",
    "서울시는 오늘 기자회견을 열고",
    "이 영화 진짜",
    "오늘 점심 뭐 먹을까?",
    "옛날 옛적에 한 마을에",
    "대한민국의 수도는",
    "이 책은",
    "파일을 저장하려면",
    "날씨가 추워서",
    "위키뉴스에 따르면",
};

// One dtype's tallies over a set of positions, against the reference.
typedef struct {
    double nats;               // -log p(target) summed over the scored positions
    size_t rows;               // positions compared
    size_t top1, set10, ord10; // positions whose top-1 / top-10 set / ordered top-10 match
    size_t set9;               // positions whose top-10 sets share at least 9 ids
    double kl;                 // KL(reference || this) summed over the positions, nats
    double secs;               // forward time
} Tally;

typedef struct {
    const char *name;  // as given in --dtypes
    KgDtype precision; // the backend's mixed precision while this variant runs
    Gpt2 m;
    Gpt2State s;
    KvSeq kv;
    Tally t;
} Variant;

// The reference's view of one row of logits.
typedef struct {
    double lse;    // log sum exp of the logits
    int top[TOPK]; // top_k's ids
} RefRow;

// A text as the trainer's prepare reads it (models/eval_bpb.sh).
typedef struct {
    int *ids; // (n) every document's tokens then EOS, in file order
    size_t n, cap;
    size_t bytes, docs; // each document's bytes plus its newline
} Text;

// top (TOPK) = the ids of the TOPK largest of l (V), largest first (ties: the lower id first).
static void top_k(int *top, const float *l, size_t V) {
    size_t k = 0;
    for (size_t v = 0; v < V; v++) {
        if (k == TOPK && l[v] <= l[top[TOPK - 1]]) continue;
        size_t i = k < TOPK ? k++ : TOPK - 1;
        for (; i > 0 && l[v] > l[top[i - 1]]; i--)
            top[i] = top[i - 1];
        top[i] = (int)v;
    }
}

// How many ids two top lists share, in any order.
static int common_ids(const int *a, const int *b) {
    int n = 0;
    for (int i = 0; i < TOPK; i++)
        for (int j = 0; j < TOPK; j++)
            n += a[i] == b[j];
    return n;
}

// ref (R) and probs (R, V) = the reference's row summaries and softmax of its logits (R, V).
static void ref_rows(RefRow *ref, float *probs, const float *logits, size_t R, size_t V) {
    for (size_t r = 0; r < R; r++) {
        const float *l = logits + r * V;
        float *p = probs + r * V;
        top_k(ref[r].top, l, V);
        const float mx = l[ref[r].top[0]];
        double z = 0;
        for (size_t v = 0; v < V; v++) {
            p[v] = expf(l[v] - mx);
            z += p[v];
        }
        ref[r].lse = mx + log(z);
        const float inv_z = (float)(1 / z);
        for (size_t v = 0; v < V; v++)
            p[v] *= inv_z;
    }
}

// Adds R rows of logits (R, V) into t, against the reference's logits, probs and rows.
// targets (R): the next token of each row, or NULL where nothing is scored (the prompts).
// KL(p || q) = sum p (l_p - l_q) + lse_q - lse_p, as both distributions sum to 1; one pass
// over the row after top_k, which finds its maximum.
static void tally_rows(Tally *t, const float *logits, const float *ref_logits, const float *probs,
                       const RefRow *ref, const int *targets, size_t R, size_t V) {
    for (size_t r = 0; r < R; r++) {
        const float *l = logits + r * V, *lp = ref_logits + r * V, *p = probs + r * V;
        int top[TOPK];
        top_k(top, l, V);
        const float mx = l[top[0]];
        double z = 0, kl = 0;
        for (size_t v = 0; v < V; v++) {
            z += expf(l[v] - mx);
            kl += p[v] * (lp[v] - l[v]);
        }
        const double lse = mx + log(z);
        if (targets) t->nats += lse - l[targets[r]];
        t->rows++;
        t->top1 += top[0] == ref[r].top[0];
        int common = common_ids(top, ref[r].top);
        t->set10 += common == TOPK;
        t->set9 += common >= TOPK - 1;
        t->ord10 += !memcmp(top, ref[r].top, sizeof top);
        t->kl += kl + lse - ref[r].lse;
    }
}

// v's logits of every one of the n tokens, from an empty cache, into v->s.logits_host.
static int run_rows(Variant *v, const int *tokens, size_t n, char *err) {
    kv_seq_truncate(&v->kv, 0);
    v->m.be->mixed = v->precision; // the variants share one backend and run one at a time
    Gpt2Seq q = {&v->kv, tokens, n, GPT2_LOGITS_ALL};
    double t0 = kg_now_s();
    int rc = gpt2_forward(&v->m, &v->s, &q, 1, err);
    v->t.secs += kg_now_s() - t0;
    return rc;
}

// Runs every variant over the same n tokens and tallies each against vs[0]; targets as in
// tally_rows. ref (n) and probs (n, V) are scratch.
static int compare_on(Variant *vs, size_t nv, const int *tokens, const int *targets, size_t n,
                      RefRow *ref, float *probs, char *err) {
    const size_t V = vs[0].m.config.vocab_size;
    for (size_t i = 0; i < nv; i++) {
        int rc = run_rows(&vs[i], tokens, n, err);
        if (rc) return rc;
        if (i == 0) ref_rows(ref, probs, vs[0].s.logits_host, n, V);
        tally_rows(&vs[i].t, vs[i].s.logits_host, vs[0].s.logits_host, probs, ref, targets, n, V);
    }
    return KG_OK;
}

// Appends a document of len bytes: its n ids, then eos. KG_ENOMEM leaves t as it was.
static int text_append(Text *t, const int *ids, size_t n, int eos, size_t len, char *err) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = 2 * (t->n + n + 1);
        int *p = realloc(t->ids, cap * sizeof *p);
        if (!p) return kg_err(err, KG_ENOMEM, "text: out of memory");
        t->ids = p;
        t->cap = cap;
    }
    memcpy(t->ids + t->n, ids, n * sizeof *ids);
    t->n += n;
    t->ids[t->n++] = eos;
    t->bytes += len + 1;
    t->docs++;
    return KG_OK;
}

// Reads path's lines as documents, as many as fit in max_bytes (0: all). Free t->ids; on
// error there is nothing to free.
static int text_load(Text *t, const char *path, const Tokenizer *tok, size_t max_bytes, char *err) {
    *t = (Text){0};
    char *buf;
    size_t len;
    int rc = kg_read_file(path, (size_t)1 << 32, &buf, &len, err);
    if (rc) return rc;
    const int eos = tok_special(tok).eos;
    for (size_t at = 0; at < len && !rc;) {
        const char *line = buf + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + 1;
        if (n > 0 && line[n - 1] == '\r') n--;
        if (n == 0) continue;
        if (max_bytes && t->bytes + n + 1 > max_bytes) break;
        int *ids;
        size_t n_ids;
        rc = tok_encode(tok, line, n, &ids, &n_ids, err);
        if (rc == KG_EINVAL) { // not UTF-8: prepare drops the line
            rc = KG_OK;
            continue;
        }
        if (!rc) rc = text_append(t, ids, n_ids, eos, n, err);
        free(ids);
    }
    free(buf);
    if (!rc && !t->docs) rc = kg_err(err, KG_EINVAL, "%s: no documents", path);
    if (rc) free(t->ids);
    return rc;
}

static void tally_reset(Variant *vs, size_t nv) {
    for (size_t i = 0; i < nv; i++)
        vs[i].t = (Tally){0};
}

// The agreement columns of a table: positions (%) whose top-1, top-10 set, at least 9 of
// the top-10 and ordered top-10 equal the reference's, and the mean KL(reference || dtype).
#define AGREE_HEAD "   top-1  top-10  9 of 10  ordered  KL nats"
static void print_agreement(const Tally *t) {
    double n = t->rows ? (double)t->rows : 1;
    printf("  %6.2f  %6.2f   %6.2f   %6.2f  %.1e", 100 * t->top1 / n, 100 * t->set10 / n,
           100 * t->set9 / n, 100 * t->ord10 / n, t->kl / n);
}

// Scores one text with every variant; bpb (nv) gets each one's bits per byte.
static int bench_text(Variant *vs, size_t nv, const char *path, const Tokenizer *tok, size_t T,
                      size_t max_bytes, RefRow *ref, float *probs, double *bpb, char *err) {
    Text t;
    int rc = text_load(&t, path, tok, max_bytes, err);
    if (rc) return rc;
    const size_t windows = t.n > T ? (t.n - 1) / T : 0;
    printf("\n%s: %zu documents, %zu bytes, %zu tokens; %zu windows of %zu (%zu tokens scored)\n",
           path, t.docs, t.bytes, t.n, windows, T, windows * T);
    tally_reset(vs, nv);
    for (size_t w = 0; w < windows && !rc; w++)
        rc = compare_on(vs, nv, t.ids + w * T, t.ids + w * T + 1, T, ref, probs, err);
    if (!rc && windows) {
        printf("dtype     bits/byte  vs %-8s  nats/tok" AGREE_HEAD "    tok/s\n", vs[0].name);
        for (size_t i = 0; i < nv; i++) {
            const Tally *a = &vs[i].t;
            bpb[i] = a->nats / (double)a->rows / M_LN2 * (double)t.n / (double)t.bytes;
            printf("%-8s  %-9.5f  %+9.3f %%  %-8.5f", vs[i].name, bpb[i],
                   100 * (bpb[i] / bpb[0] - 1), a->nats / (double)a->rows);
            print_agreement(a);
            printf("  %7.0f\n", (double)a->rows / a->secs);
        }
    }
    if (!rc && !windows) rc = kg_err(err, KG_EINVAL, "%s: fewer than %zu tokens", path, T + 1);
    free(t.ids);
    return rc;
}

// The agreement at every position of the model card's prompts.
static int bench_prompts(Variant *vs, size_t nv, const Tokenizer *tok, RefRow *ref, float *probs,
                         char *err) {
    tally_reset(vs, nv);
    int rc = KG_OK;
    for (size_t p = 0; p < sizeof PROMPTS / sizeof *PROMPTS && !rc; p++) {
        int *ids;
        size_t n;
        if ((rc = tok_encode(tok, PROMPTS[p], strlen(PROMPTS[p]), &ids, &n, err))) break;
        rc = compare_on(vs, nv, ids, NULL, n, ref, probs, err);
        free(ids);
    }
    if (rc) return rc;
    printf("\nthe model card's %zu prompts, every position (%zu): against %s\n",
           sizeof PROMPTS / sizeof *PROMPTS, vs[0].t.rows, vs[0].name);
    printf("dtype   " AGREE_HEAD "\n");
    for (size_t i = 0; i < nv; i++) {
        printf("%-8s", vs[i].name);
        print_agreement(&vs[i].t);
        printf("\n");
    }
    return KG_OK;
}

static void variant_close(Variant *v) {
    kv_free(&v->kv);
    gpt2_state_free(&v->s, &v->m);
    gpt2_close(&v->m);
}

// Opens v as dtype name with room for rows tokens per forward; on error v holds nothing.
static int variant_open(Variant *v, const char *dir, KgBackend *be, const char *name, size_t rows,
                        char *err) {
    char dtype[16], prec_name[16];
    size_t len = strcspn(name, "@:"), plen = name[len] == '@' ? strcspn(name + len + 1, ":") : 0;
    snprintf(dtype, sizeof dtype, "%.*s", (int)(len < 15 ? len : 15), name);
    snprintf(prec_name, sizeof prec_name, "%.*s", (int)(plen < 15 ? plen : 15), name + len + 1);
    const char *kv = strstr(name, ":kv=");
    KgDtype dt, prec = KG_F32, kv_dt = KG_F32;
    if (kg_dtype_parse(dtype, &dt, NULL) || (plen && kg_precision_parse(prec_name, &prec, NULL)) ||
        (kv && kg_dtype_parse(kv + 4, &kv_dt, NULL)))
        return kg_err(err, KG_EINVAL, "--dtypes: unknown dtype %s", name);
    *v = (Variant){.name = name, .precision = prec};
    be->kv_dtype = kv_dt; // the variant's pool is made in its dtype (kv_init below)
    int rc = gpt2_open(&v->m, dir, be, dt, err);
    if (rc) return rc;
    if (rows > v->m.config.n_ctx)
        rc = kg_err(err, KG_EINVAL, "--seq %zu exceeds n_ctx %zu", rows, v->m.config.n_ctx);
    if (!rc) rc = gpt2_state_init(&v->s, &v->m, rows, rows, err);
    if (!rc) rc = kv_init(&v->kv, &v->m, err);
    if (rc)
        variant_close(v);
    else
        printf("%-8s  %s\n", name, v->m.src.what);
    return rc;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_quant_quality [--model DIR] [--dtypes f32,f16,q8_0,q4_0]\n"
                    "         [--threads 2] [--seq 256] [--max-bytes N] [--check] TEXT...\n");
}

int main(int argc, char **argv) {
    char model_buf[4096], err[KG_ERRLEN] = "";
    const char *model = kg_find_data_dir("models/default", model_buf, sizeof model_buf);
    char dtypes[256] = "f32,f16,q8_0,q4_0";
    int threads = 2, check = 0;
    size_t T = 256, max_bytes = 0;
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"dtypes", 1, 0, 'd'},    {"threads", 1, 0, 'j'},
        {"seq", 1, 0, 's'},   {"max-bytes", 1, 0, 'b'}, {"check", 0, 0, 'c'},
        {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'm') {
            model = optarg;
        } else if (c == 'd') {
            snprintf(dtypes, sizeof dtypes, "%s", optarg);
        } else if (c == 'j') {
            threads = atoi(optarg);
        } else if (c == 's') {
            T = (size_t)atol(optarg);
        } else if (c == 'b') {
            max_bytes = (size_t)atol(optarg);
        } else if (c == 'c') {
            check = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (optind == argc || !model || T == 0) {
        usage();
        return 2;
    }

    KgBackend *be = kg_cpu_backend_new(threads, err);
    Tokenizer *tok = NULL;
    if (!be || tok_open(&tok, model, err)) {
        fprintf(stderr, "bench_quant_quality: %s\n", err);
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); // each table as its text finishes
    printf("model %s, %d threads, %s\n", model, threads, be->ops->name);
    Variant vs[MAX_DTYPES];
    size_t nv = 0;
    int rc = KG_OK;
    for (char *save, *d = strtok_r(dtypes, ",", &save); d && !rc && nv < MAX_DTYPES;
         d = strtok_r(NULL, ",", &save))
        if (!(rc = variant_open(&vs[nv], model, be, d, T, err))) nv++;
    if (!rc && !nv) rc = kg_err(err, KG_EINVAL, "--dtypes: none given");
    const size_t V = nv ? vs[0].m.config.vocab_size : 0;
    RefRow *ref = malloc(T * sizeof *ref);
    float *probs = malloc(T * V * sizeof *probs);
    if (!rc && (!ref || !probs)) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc)
        printf("columns: %% of positions where top-1, top-10 set, at least 9 of the top-10, "
               "ordered top-10 equal %s's; mean KL(%s || dtype)\n",
               vs[0].name, vs[0].name);
    int failed = 0;
    double bpb[MAX_DTYPES];
    for (int a = optind; a < argc && !rc; a++) {
        rc = bench_text(vs, nv, argv[a], tok, T, max_bytes, ref, probs, bpb, err);
        for (size_t i = 1; i < nv && !rc && check; i++) {
            double tol = vs[i].m.dtype == KG_Q8_0   ? 0.01 // issue 16: q8_0 within 1 %
                         : vs[i].m.dtype == KG_Q4_0 ? 0.05 // and q4_0 within 5 %
                                                    : 0;
            if (tol == 0) continue;
            int ok = fabs(bpb[i] / bpb[0] - 1) <= tol;
            printf("check: %s %+.3f %% of %s's bits per byte (within %.0f %%): %s\n", vs[i].name,
                   100 * (bpb[i] / bpb[0] - 1), vs[0].name, 100 * tol, ok ? "ok" : "FAILED");
            failed |= !ok;
        }
    }
    if (!rc) rc = bench_prompts(vs, nv, tok, ref, probs, err);
    if (rc) fprintf(stderr, "bench_quant_quality: %s\n", err);
    for (size_t i = 0; i < nv; i++)
        variant_close(&vs[i]);
    free(ref);
    free(probs);
    tok_free(tok);
    kg_backend_free(be);
    return rc || failed ? 1 : 0;
}
