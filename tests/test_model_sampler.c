// test_model_sampler — top-k, log-softmax and sampling against brute-force references:
// top-k equals a full sort (ties by lower id); logprobs equal a double-precision log-softmax
// (tolerance 1e-5); sampled frequencies match the distribution the parameters define
// (temperature, top-k, top-p) within 4 standard errors; greedy is argmax; a seed repeats.
// Penalties (issue 15): repetition, frequency/presence and logit_bias against their plain
// formulas evaluated here (brute force over the token lists, in double) and against
// tests/ref/penalty_ref.py (transformers' and vLLM's definitions in PyTorch), relative
// tolerance 1e-5; a greedy loop that repetition 1.3 breaks; -100 bans and +100 forces under
// sampling; two jobs' states stay apart; no NaN from NaN/inf rows or extreme values.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "model/sampler.h"

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x - y;
}

static const float *g_logits;
static int cmp_ids(const void *a, const void *b) { return cmp_desc(a, b, (void *)g_logits); }

// Reference softmax in double with temperature t.
static void softmax_ref(const float *logits, size_t V, double t, double *p) {
    double mx = -INFINITY, sum = 0;
    for (size_t i = 0; i < V; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (size_t i = 0; i < V; i++)
        sum += p[i] = exp((logits[i] - mx) / t);
    for (size_t i = 0; i < V; i++)
        p[i] /= sum;
}

static void test_topk(void) {
    const size_t V = 51200;
    float *logits = malloc(V * sizeof *logits);
    int *ids = malloc(V * sizeof *ids);
    double *p = malloc(V * sizeof *p);
    srand(1);
    for (size_t i = 0; i < V; i++)
        logits[i] = (float)(rand() % 2000) / 100.0f - 10.0f; // ties
    for (size_t i = 0; i < V; i++)
        ids[i] = (int)i;
    g_logits = logits;
    qsort(ids, V, sizeof *ids, cmp_ids);
    KgCandidate c[50];
    size_t k = logits_topk(logits, V, 1.0f, 50, c);
    int same = k == 50;
    for (size_t i = 0; same && i < k; i++)
        same = c[i].id == ids[i];
    CHECK_MSG(same, "top-50 differs from a full sort");
    // logits_rank is the place in that full sort, ties included, for every id
    int ranks_ok = 1;
    for (size_t r = 0; r < V; r += 97)
        ranks_ok &= logits_rank(logits, V, ids[r]) == r + 1;
    CHECK_MSG(ranks_ok, "logits_rank differs from a full sort's place");
    softmax_ref(logits, V, 1.0, p);
    double worst = 0;
    for (size_t i = 0; i < k; i++) {
        double e = fabs(c[i].logprob - log(p[c[i].id]));
        worst = e > worst ? e : worst;
        CHECK(fabs(c[i].prob - p[c[i].id]) <= 1e-6);
    }
    printf("top-50 of 51,200 (with ties): ids as a full sort; max |d logprob| %.2e (tol 1e-5)\n",
           worst);
    CHECK(worst <= 1e-5);
    // temperature divides the logits before the softmax
    softmax_ref(logits, V, 0.7, p);
    logits_topk(logits, V, 0.7f, 5, c);
    for (int i = 0; i < 5; i++)
        CHECK(fabs(c[i].logprob - log(p[c[i].id])) <= 1e-5);
    CHECK(logits_topk(logits, 3, 1.0f, 10, c) == 3); // k > V
    free(logits);
    free(ids);
    free(p);
}

// Draws n samples and compares each token's frequency with the expected probability q.
static int frequencies_match(Sampler *s, const float *logits, const double *q, size_t V, int n) {
    int *count = calloc(V, sizeof *count);
    for (int i = 0; i < n; i++)
        count[sampler_sample(s, logits)]++;
    int ok = 1;
    for (size_t v = 0; v < V; v++) {
        double f = (double)count[v] / n, se = sqrt(q[v] * (1 - q[v]) / n) + 1e-9;
        if (fabs(f - q[v]) > 4 * se + 1e-12) {
            fprintf(stderr, "token %zu: frequency %.4f, expected %.4f\n", v, f, q[v]);
            ok = 0;
        }
    }
    free(count);
    return ok;
}

static void test_sampling(void) {
    const size_t V = 8;
    const float logits[8] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -2.0f, 3.0f};
    double p[8], q[8];
    const int n = 200000;
    // plain, temperature 0.8
    Sampler *s = sampler_new(V, 0.8f, 0, 1.0f, 42);
    softmax_ref(logits, V, 0.8, p);
    CHECK(frequencies_match(s, logits, p, V, n));
    sampler_free(s);
    // top-k 3: the three best (ids 7, 0, 1) renormalized
    s = sampler_new(V, 1.0f, 3, 1.0f, 43);
    softmax_ref(logits, V, 1.0, p);
    memset(q, 0, sizeof q);
    double z = p[7] + p[0] + p[1];
    q[7] = p[7] / z, q[0] = p[0] / z, q[1] = p[1] / z;
    CHECK(frequencies_match(s, logits, q, V, n));
    sampler_free(s);
    // top-p 0.8: the smallest prefix by probability with mass >= 0.8
    s = sampler_new(V, 1.0f, 0, 0.8f, 44);
    int order[8] = {7, 0, 1, 2, 3, 4, 5, 6};
    double mass = 0;
    memset(q, 0, sizeof q);
    for (int i = 0; i < 8 && mass < 0.8; i++)
        mass += q[order[i]] = p[order[i]];
    for (int i = 0; i < 8; i++)
        q[i] /= mass;
    CHECK(frequencies_match(s, logits, q, V, n));
    sampler_free(s);
    // greedy, and a seed that repeats
    s = sampler_new(V, 0.0f, 0, 1.0f, 1);
    CHECK(sampler_sample(s, logits) == 7);
    sampler_free(s);
    Sampler *a = sampler_new(V, 1.0f, 0, 0.9f, 99), *b = sampler_new(V, 1.0f, 0, 0.9f, 99);
    int same = 1;
    for (int i = 0; i < 1000; i++)
        same &= sampler_sample(a, logits) == sampler_sample(b, logits);
    CHECK(same);
    sampler_free(a);
    sampler_free(b);
    printf("sampling: frequencies of %d draws within 4 standard errors (plain, top-k, top-p)\n", n);
}

// Tiny, denormal and NaN temperatures and top_p values at or rounding to 0 act as their limit
// (the best token); NaN and infinite logits never reach an index: every draw is in range and
// never a NaN logit's (issue 13: temperature 1e-40 once read before the candidates).
static void test_limits(void) {
    const size_t V = 50;
    float logits[50];
    for (size_t i = 0; i < V; i++)
        logits[i] = (float)((i * 37) % 11) * 0.25f - 1.0f; // best: ids with (37 i) % 11 == 10
    int best = 0;
    for (size_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = (int)i;
    logits[best] += 0.5f; // one best token (the others tie in groups)
    const float temps[] = {1e-40f, 1.4e-45f, 1.17549435e-38f, 1e-10f, 5e-5f, NAN};
    const float top_ps[] = {1.0f, 0.9f, 1e-30f, 0.0f};
    const size_t top_ks[] = {0, 5};
    int bad = 0;
    for (size_t a = 0; a < sizeof temps / sizeof *temps; a++)
        for (size_t b = 0; b < sizeof top_ps / sizeof *top_ps; b++)
            for (size_t c = 0; c < 2; c++) {
                Sampler *s = sampler_new(V, temps[a], top_ks[c], top_ps[b], 5);
                REQUIRE(s, "oom");
                for (int d = 0; d < 20; d++)
                    bad += sampler_sample(s, logits) != best;
                sampler_free(s);
            }
    CHECK_MSG(bad == 0, "%d draws at a tiny temperature were not the best token", bad);
    // top_p at or rounding to 0, any temperature: the best token only
    for (size_t b = 2; b < 4; b++) {
        Sampler *s = sampler_new(V, 1.0f, 0, top_ps[b], 6);
        for (int d = 0; d < 50; d++)
            bad += sampler_sample(s, logits) != best;
        sampler_free(s);
    }
    CHECK_MSG(bad == 0, "top_p ~ 0 drew another token %d times", bad);
    // the displayed distribution at a tiny temperature: finite, all on the best
    KgCandidate c[5];
    logits_topk(logits, V, 1e-40f, 5, c);
    CHECK(c[0].id == best && fabsf(c[0].prob - 1.0f) < 1e-6f && !isnan(c[4].prob));
    CHECK(isfinite(logits_logsumexp(logits, V, 1e-40f)));

    // NaN logits: never drawn, whatever the settings; ranked last by top-k
    float odd[50];
    for (size_t i = 0; i < V; i++)
        odd[i] = i % 3 == 0 ? NAN : logits[i];
    int nan_drawn = 0, out_of_range = 0;
    for (size_t b = 0; b < 2; b++)
        for (size_t c2 = 0; c2 < 2; c2++) {
            Sampler *s = sampler_new(V, 1.5f, top_ks[c2], top_ps[b], 7);
            for (int d = 0; d < 500; d++) {
                int id = sampler_sample(s, odd);
                out_of_range += id < 0 || id >= (int)V;
                nan_drawn += id >= 0 && id < (int)V && isnan(odd[id]);
            }
            sampler_free(s);
        }
    CHECK_MSG(nan_drawn == 0 && out_of_range == 0, "NaN logits: %d drawn, %d out of range",
              nan_drawn, out_of_range);
    CHECK(isfinite(logits_logsumexp(odd, V, 1.0f)));
    KgCandidate all[50];
    logits_topk(odd, V, 1.0f, V, all);
    int order_ok = 1;
    for (size_t i = 0; i < V; i++) // the 33 numbers first, then the 17 NaNs
        order_ok &= (i < 33) == !isnan(all[i].logit);
    CHECK_MSG(order_ok, "top-k does not rank NaN logits last");
    int nan_ranks_ok = 1; // logits_rank agrees with that order, NaNs included
    for (size_t i = 0; i < V; i++)
        nan_ranks_ok &= logits_rank(odd, V, all[i].id) == i + 1;
    CHECK_MSG(nan_ranks_ok, "logits_rank disagrees with top-k's order on NaN logits");
    // all NaN: nothing to draw (-1), greedy too; a +inf logit takes every draw; all -inf but
    // NaNs (the UTF-8 mask's bans over a broken model's row): nothing to draw either (before,
    // a banned -inf token was drawn and a U+FFFD reached the client)
    for (size_t i = 0; i < V; i++)
        odd[i] = NAN;
    Sampler *g = sampler_new(V, 0.0f, 0, 1.0f, 8), *s = sampler_new(V, 1.0f, 0, 0.9f, 8);
    CHECK(sampler_sample(g, odd) == -1 && sampler_sample(s, odd) == -1);
    odd[17] = INFINITY;
    odd[3] = 1.0f;
    CHECK(sampler_sample(g, odd) == 17 && sampler_sample(s, odd) == 17);
    odd[17] = -INFINITY;
    odd[3] = -INFINITY;
    Sampler *k = sampler_new(V, 1.0f, 5, 1.0f, 8); // the top-k path
    CHECK(sampler_sample(g, odd) == -1 && sampler_sample(s, odd) == -1 &&
          sampler_sample(k, odd) == -1);
    odd[3] = 0.5f; // one number among bans and NaNs: it is the draw
    CHECK(sampler_sample(g, odd) == 3 && sampler_sample(s, odd) == 3 &&
          sampler_sample(k, odd) == 3);
    sampler_free(k);
    sampler_free(g);
    sampler_free(s);
    printf("limits: tiny temperatures and top_p act as greedy; NaN logits never drawn\n");
}

// ---------------------------------------------------------------------------------------
// Penalties

// xorshift64*, uniform in [0, 1): the tests' own random numbers.
static float rng_uniform(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (float)((x * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

// The penalties by their plain formulas, one id at a time in double, in sampler.h's order;
// seen and count in dense arrays of V (no state shared with the sampler).
static void penalize_ref(double *out, const float *logits, size_t V, const int *prompt,
                         size_t n_prompt, const int *gen, size_t n_gen, const KgPenalties *p) {
    char *seen = calloc(V, 1);
    unsigned *count = calloc(V, sizeof *count);
    for (size_t i = 0; i < n_prompt; i++)
        seen[prompt[i]] = 1;
    for (size_t i = 0; i < n_gen; i++)
        seen[gen[i]] = 1, count[gen[i]]++;
    for (size_t v = 0; v < V; v++) {
        double x = logits[v];
        if (seen[v]) x = x < 0 ? x * p->repetition : x / p->repetition;
        x -= p->frequency * (double)count[v] + p->presence * (count[v] > 0);
        out[v] = x;
    }
    for (size_t i = 0; i < p->n_bias; i++)
        out[p->bias[i].id] += p->bias[i].bias;
    free(seen);
    free(count);
}

// got (float) matches want: both NaN, the same infinity, or within 1e-5 relative.
static int same_logit(float got, double want) {
    if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
    if (isinf((float)want) || isinf(got)) return (float)want == got;
    return fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want));
}

// A state fed prompt and gen (REQUIREd to work), or NULL on error.
static SamplerPenalty *penalty_fed(size_t V, const KgPenalties *p, const int *prompt,
                                   size_t n_prompt, const int *gen, size_t n_gen) {
    SamplerPenalty *ps;
    char err[KG_ERRLEN];
    REQUIRE(sampler_penalty_new(&ps, V, p, err) == KG_OK, "%s", err);
    REQUIRE(sampler_penalty_prompt(ps, prompt, n_prompt, err) == KG_OK, "%s", err);
    for (size_t i = 0; i < n_gen; i++)
        REQUIRE(sampler_penalty_accept(ps, gen[i], err) == KG_OK, "%s", err);
    return ps;
}

// Applies ps to logits (out of place and in place) and compares with want; the count of ids
// that differ. The raw row must be left as it was.
static int penalty_mismatches(const SamplerPenalty *ps, const float *logits, const double *want,
                              size_t V) {
    float *out = malloc(V * sizeof *out), *inplace = malloc(V * sizeof *inplace);
    memcpy(inplace, logits, V * sizeof *inplace);
    sampler_penalty_apply(ps, out, logits);
    sampler_penalty_apply(ps, inplace, inplace);
    int bad = 0;
    for (size_t v = 0; v < V; v++) {
        int ok = same_logit(out[v], want[v]) &&
                 (memcmp(&out[v], &inplace[v], sizeof(float)) == 0 || isnan(out[v]));
        if (!ok && bad++ < 5)
            fprintf(stderr, "  id %zu: logit %g -> %.9g (in place %.9g), want %.9g\n", v, logits[v],
                    out[v], inplace[v], want[v]);
    }
    free(out);
    free(inplace);
    return bad;
}

static void test_penalty_plain(void) {
    // hand-computed: repetition 1.5 on ids 0, 1 (prompt) and 3, 5 (generated: 3 twice, 5
    // once); frequency 0.25 and presence 0.5 on 3 and 5 only; bias +1 on 4, -2 on 2
    const float logits[6] = {2.0f, -1.0f, 0.0f, 0.5f, -3.0f, 1.0f};
    const int prompt[2] = {0, 1}, gen[3] = {3, 5, 3};
    const KgLogitBias bias[2] = {{4, 1.0f}, {2, -2.0f}};
    KgPenalties p = {bias, 2, 0.5f, 0.25f, 1.5f};
    const double hand[6] = {
        2.0 / 1.5, -1.5, -2.0, 0.5 / 1.5 - (0.25 * 2 + 0.5), -2.0, 1.0 / 1.5 - (0.25 + 0.5)};
    SamplerPenalty *ps = penalty_fed(6, &p, prompt, 2, gen, 3);
    CHECK(penalty_mismatches(ps, logits, hand, 6) == 0);
    sampler_penalty_free(ps);

    // each penalty alone, then all together, on random small rows against penalize_ref
    const KgPenalties only[] = {{NULL, 0, 0.0f, 0.0f, 1.3f}, {NULL, 0, 0.0f, 0.0f, 0.7f},
                                {NULL, 0, 0.0f, 0.9f, 1.0f}, {NULL, 0, -1.5f, 0.0f, 1.0f},
                                {NULL, 0, 0.0f, 0.0f, 1.0f}, {NULL, 0, 0.6f, -0.4f, 1.2f}};
    uint64_t rng = 12345;
    int bad = 0, rows = 0;
    for (size_t c = 0; c < sizeof only / sizeof *only; c++)
        for (int trial = 0; trial < 50; trial++) {
            enum { V = 40 };
            float row[V];
            int pr[12], ge[25];
            KgLogitBias b[6];
            double want[V];
            for (size_t v = 0; v < V; v++)
                row[v] = (float)((int)(rng_uniform(&rng) * 33) - 16) * 0.5f; // ties and 0
            size_t np = (size_t)(rng_uniform(&rng) * 12), ng = (size_t)(rng_uniform(&rng) * 25);
            for (size_t i = 0; i < np; i++)
                pr[i] = (int)(rng_uniform(&rng) * 10); // a few ids, so that they repeat
            for (size_t i = 0; i < ng; i++)
                ge[i] = (int)(rng_uniform(&rng) * (i % 2 ? 10 : V));
            KgPenalties q = only[c];
            if (c == 4 || c == 5) { // bias alone, and everything
                q.n_bias = 6;
                q.bias = b;
                for (size_t i = 0; i < 6; i++)
                    b[i] = (KgLogitBias){(int)(rng_uniform(&rng) * V),
                                         rng_uniform(&rng) * 200.0f - 100.0f};
                b[1].id = b[0].id; // a repeated id: the biases add
            }
            penalize_ref(want, row, V, pr, np, ge, ng, &q);
            ps = penalty_fed(V, &q, pr, np, ge, ng);
            bad += penalty_mismatches(ps, row, want, V) != 0;
            rows++;
            sampler_penalty_free(ps);
        }
    CHECK_MSG(bad == 0, "%d of %d rows differ from the plain formulas", bad, rows);
    printf("penalties: hand-computed row and %d random rows as the plain formulas (rel tol "
           "1e-5), in place = out of place\n",
           rows);
}

// Reads n bytes at *p from a buffer ending at end; NULL when short.
static const void *take(const unsigned char **p, const unsigned char *end, size_t n) {
    if ((size_t)(end - *p) < n) return NULL;
    const void *r = *p;
    *p += n;
    return r;
}

// tests/ref/penalty_ref.py's cases: transformers' repetition processor and vLLM's
// frequency/presence and logit_bias, in PyTorch.
static void test_penalty_torch(void) {
    const char *python = getenv("KG_PYTHON"), *src = getenv("KG_SOURCE_DIR");
    if (!python || !python[0] || access(python, X_OK) || !src) {
        printf("SKIP: penalties vs PyTorch: KG_PYTHON or KG_SOURCE_DIR not set\n");
        return;
    }
    char path[] = "/tmp/kg_penalty_ref_XXXXXX", cmd[2048];
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    snprintf(cmd, sizeof cmd, "%s %s/tests/ref/penalty_ref.py %s", python, src, path);
    int rc = system(cmd);
    if (rc != 0) {
        unlink(path);
        CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 77, "%s failed (status %d)", cmd, rc);
        printf("SKIP: penalties vs PyTorch: no torch\n");
        return;
    }
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size);
    REQUIRE(buf && fread(buf, 1, (size_t)size, f) == (size_t)size, "read %s", path);
    fclose(f);
    unlink(path);
    const unsigned char *p = buf, *end = buf + size;
    const uint32_t *hdr = take(&p, end, 12);
    REQUIRE(hdr && hdr[0] == 0x4E50474B && hdr[1] == 1, "%s: bad magic or version", path);
    int n_cases = (int)hdr[2], bad_cases = 0;
    size_t n_logits = 0;
    for (int c = 0; c < n_cases; c++) {
        const int32_t *dims = take(&p, end, 16);
        const float *par = take(&p, end, 12);
        REQUIRE(dims && par && dims[0] > 0 && dims[1] >= 0 && dims[2] >= 0 && dims[3] >= 0,
                "case %d: truncated", c);
        size_t V = (size_t)dims[0], np = (size_t)dims[1], ng = (size_t)dims[2];
        size_t nb = (size_t)dims[3];
        const int32_t *prompt = take(&p, end, np * 4), *gen = take(&p, end, ng * 4);
        const int32_t *bias_id = take(&p, end, nb * 4);
        const float *bias = take(&p, end, nb * 4), *logits = take(&p, end, V * 4);
        const float *expected = take(&p, end, V * 4);
        REQUIRE(expected, "case %d: truncated", c);
        KgLogitBias *b = malloc((nb ? nb : 1) * sizeof *b);
        double *want = malloc(V * sizeof *want);
        for (size_t i = 0; i < nb; i++)
            b[i] = (KgLogitBias){bias_id[i], bias[i]};
        for (size_t v = 0; v < V; v++)
            want[v] = expected[v];
        KgPenalties q = {b, nb, par[0], par[1], par[2]};
        SamplerPenalty *ps = penalty_fed(V, &q, prompt, np, gen, ng);
        int bad = penalty_mismatches(ps, logits, want, V);
        CHECK_MSG(bad == 0,
                  "case %d (V %zu, presence %g, frequency %g, repetition %g): %d ids "
                  "differ from PyTorch",
                  c, V, par[0], par[1], par[2], bad);
        bad_cases += bad != 0;
        n_logits += V;
        sampler_penalty_free(ps);
        free(b);
        free(want);
    }
    CHECK(p == end);
    free(buf);
    printf("penalties vs PyTorch (transformers' repetition, vLLM's frequency/presence and "
           "logit_bias): %d cases, %zu logits, %d differ (rel tol 1e-5)\n",
           n_cases, n_logits, bad_cases);
}

// A toy "model" whose greedy continuation of "이 책은" loops: logits depend on the last token
// only. Tokens: 0 이, 1 책은, 2 정말, 3 좋다, 4 ".", 5 eos, 6 and 7 fillers. shift moves every
// logit (GPT-2's are mostly negative: then the penalty multiplies).
static void toy_logits(float *row, int last, float shift) {
    static const float next[8][8] = {{0, 4.0f, 1.0f, 0, 0, 0, 0, 0}, {3.0f, 0, 2.5f, 0, 0, 0, 0, 0},
                                     {2.0f, 0, 0, 3.0f, 0, 0, 0, 0}, {0, 0, 0, 0, 3.0f, 0, 0, 0},
                                     {2.9f, 0, 0, 0, 0, 3.0f, 0, 0}, {3.0f, 0, 0, 0, 0, 0, 0, 0},
                                     {3.0f, 0, 0, 0, 0, 0, 0, 0},    {3.0f, 0, 0, 0, 0, 0, 0, 0}};
    for (int v = 0; v < 8; v++)
        row[v] = next[last][v] + shift;
}

// Greedy generation of up to n tokens after the prompt {0, 1}; the count written into out.
static size_t toy_generate(int *out, size_t n, float repetition, float shift, int *moved) {
    const int prompt[2] = {0, 1};
    KgPenalties p = {.repetition = repetition};
    SamplerPenalty *ps = penalty_fed(8, &p, prompt, 2, NULL, 0);
    Sampler *s = sampler_new(8, 0.0f, 0, 1.0f, 1);
    float raw[8], row[8], copy[8];
    int last = prompt[1];
    size_t k = 0;
    *moved = 0;
    while (k < n) {
        toy_logits(raw, last, shift);
        memcpy(copy, raw, sizeof raw);
        const float *use = raw;
        if (sampler_penalty_active(ps)) {
            sampler_penalty_apply(ps, row, raw);
            use = row;
        }
        CHECK(memcmp(copy, raw, sizeof raw) == 0); // the raw row is left alone
        int id = sampler_sample(s, use), raw_id = sampler_sample(s, raw);
        *moved += id != raw_id;
        REQUIRE(sampler_penalty_accept(ps, id, NULL) == KG_OK, "accept");
        out[k++] = last = id;
        if (id == 5) break;
    }
    sampler_free(s);
    sampler_penalty_free(ps);
    return k;
}

static void test_penalty_greedy_loop(void) {
    int out[12], moved;
    for (int neg = 0; neg < 2; neg++) {
        float shift = neg ? -60.0f : 0.0f;
        size_t n = toy_generate(out, 12, 1.0f, shift, &moved);
        int loops = n == 12 && moved == 0;
        for (size_t i = 0; i < n; i++)
            loops &= out[i] == (i % 2 ? 1 : 0); // 이 책은 이 책은 ...
        CHECK_MSG(loops, "the toy model should loop without a penalty (shift %g)", shift);
        // repetition 1.3: after 책은, 이 (seen; 3.0 / 1.3 = 2.31, or -57 * 1.3 = -74.1) falls
        // behind 정말 (2.5, or -57.5), and the sentence ends: 정말 좋다 . eos
        n = toy_generate(out, 12, 1.3f, shift, &moved);
        CHECK_MSG(n == 4 && out[0] == 2 && out[1] == 3 && out[2] == 4 && out[3] == 5,
                  "repetition 1.3 (shift %g): %zu tokens, first %d", shift, n, out[0]);
        CHECK(moved >= 1);
    }
    printf("penalties: greedy 이 책은 loops at repetition 1; at 1.3 the argmax leaves the "
           "repeated token (positive and negative logits)\n");
}

static void test_penalty_bias_sampling(void) {
    enum { V = 16 };
    float logits[V];
    for (int v = 0; v < V; v++)
        logits[v] = (float)((v * 7) % 9) * 0.5f - 2.0f; // in [-2, 2]
    logits[5] = 3.0f;                                   // the best
    logits[12] = -2.0f;                                 // among the worst
    const struct {
        float t;
        size_t k;
        float p;
    } conf[] = {{1.0f, 0, 1.0f}, {2.0f, 0, 1.0f}, {1.5f, 4, 0.95f}, {0.7f, 0, 0.9f}, {0, 0, 1}};
    KgLogitBias ban = {5, -100.0f}, force = {12, 100.0f};
    KgPenalties pb = {&ban, 1, 0, 0, 1.0f}, pf = {&force, 1, 0, 0, 1.0f};
    SamplerPenalty *psb = penalty_fed(V, &pb, NULL, 0, NULL, 0);
    SamplerPenalty *psf = penalty_fed(V, &pf, NULL, 0, NULL, 0);
    float rb[V], rf[V];
    sampler_penalty_apply(psb, rb, logits);
    sampler_penalty_apply(psf, rf, logits);
    int banned = 0, not_forced = 0, draws = 0, best_unbiased = 0;
    for (size_t c = 0; c < sizeof conf / sizeof *conf; c++)
        for (uint64_t seed = 0; seed < 200; seed++) {
            Sampler *s = sampler_new(V, conf[c].t, conf[c].k, conf[c].p, seed);
            for (int d = 0; d < 50; d++, draws++) {
                int id = sampler_sample(s, rb);
                banned += id == 5 || id < 0;
                not_forced += sampler_sample(s, rf) != 12;
                best_unbiased += sampler_sample(s, logits) == 5;
            }
            sampler_free(s);
        }
    CHECK_MSG(banned == 0, "logit_bias -100 drew the banned token %d times of %d", banned, draws);
    CHECK_MSG(not_forced == 0, "logit_bias +100 missed the forced token %d times of %d", not_forced,
              draws);
    CHECK(best_unbiased > draws / 4); // without the bias, token 5 is drawn often
    printf("penalties: logit_bias -100 never drawn, +100 always, in %d draws each over 200 seeds "
           "(T 0.7..2, top-k, top-p, greedy); unbiased, the banned token won %d\n",
           draws, best_unbiased);
    sampler_penalty_free(psb);
    sampler_penalty_free(psf);
}

// Two jobs' states, fed interleaved, each apply as its own token lists alone.
static void test_penalty_per_job(void) {
    enum { V = 30 };
    float logits[V];
    for (int v = 0; v < V; v++)
        logits[v] = (float)(v % 7) - 3.0f;
    const int pa[2] = {1, 2}, ga[5] = {3, 3, 7, 3, 9}, pb[1] = {4}, gb[4] = {5, 3, 5, 5};
    KgPenalties p = {NULL, 0, 0.5f, 1.0f, 1.2f};
    SamplerPenalty *a = penalty_fed(V, &p, pa, 2, NULL, 0), *b = penalty_fed(V, &p, pb, 1, NULL, 0);
    for (int i = 0; i < 5; i++) {
        REQUIRE(sampler_penalty_accept(a, ga[i], NULL) == KG_OK, "accept");
        if (i < 4) REQUIRE(sampler_penalty_accept(b, gb[i], NULL) == KG_OK, "accept");
    }
    double wa[V], wb[V];
    penalize_ref(wa, logits, V, pa, 2, ga, 5, &p);
    penalize_ref(wb, logits, V, pb, 1, gb, 4, &p);
    CHECK(penalty_mismatches(a, logits, wa, V) == 0);
    CHECK(penalty_mismatches(b, logits, wb, V) == 0);
    float ra[V], rb[V];
    sampler_penalty_apply(a, ra, logits);
    sampler_penalty_apply(b, rb, logits);
    CHECK(ra[5] == logits[5] && rb[1] == logits[1]); // one job's tokens leave the other alone
    CHECK(ra[3] != rb[3]);                           // 3: three times in a, once in b
    sampler_penalty_free(a);
    sampler_penalty_free(b);
    printf("penalties: two jobs' states, fed interleaved, stay apart\n");
}

// Rows of NaN, infinities, float's extremes and signed zeros, at seen and biased ids, under
// the extremes of the allowed ranges and beyond: NaN only where the logit was NaN, each
// infinity stays, and counts in the hundreds of thousands stay finite arithmetic.
static void test_penalty_extremes(void) {
    enum { V = 13 };
    const float row[V] = {NAN,    INFINITY, -INFINITY, 3e38f, -3e38f,  0.0f,    -0.0f,
                          1e-45f, -1e-45f,  5.0f,      -5.0f, FLT_MAX, -FLT_MAX};
    const float reps[] = {1e-30f, 1e-3f, 1.0f, 1.3f, 1e3f, 1e30f};
    const float pens[] = {-2.0f, 0.0f, 2.0f, 1e30f, -1e30f, FLT_MAX, -FLT_MAX};
    const float biases[] = {-100.0f, 100.0f};
    int all[2 * V], nan_made = 0, inf_moved = 0, combos = 0;
    for (int i = 0; i < 2 * V; i++)
        all[i] = i % V;
    for (size_t r = 0; r < sizeof reps / sizeof *reps; r++)
        for (size_t a = 0; a < sizeof pens / sizeof *pens; a++)
            for (size_t f = 0; f < sizeof pens / sizeof *pens; f++)
                for (size_t bi = 0; bi < 2; bi++) {
                    KgLogitBias b[V];
                    for (int v = 0; v < V; v++)
                        b[v] = (KgLogitBias){v, biases[bi]};
                    KgPenalties p = {b, V, pens[a], pens[f], reps[r]};
                    SamplerPenalty *ps = penalty_fed(V, &p, all, V, all, 2 * V);
                    float out[V];
                    sampler_penalty_apply(ps, out, row);
                    for (int v = 0; v < V; v++) {
                        nan_made += isnan(out[v]) != isnan(row[v]);
                        inf_moved += isinf(row[v]) && out[v] != row[v];
                    }
                    combos++;
                    sampler_penalty_free(ps);
                }
    CHECK_MSG(nan_made == 0 && inf_moved == 0, "%d NaNs made, %d infinities moved", nan_made,
              inf_moved);
    // one token generated 300,000 times, frequency 2, presence 0.5: 600,000.5 off its logit
    KgPenalties p = {NULL, 0, 0.5f, 2.0f, 1.0f};
    SamplerPenalty *ps = penalty_fed(V, &p, NULL, 0, NULL, 0);
    for (int i = 0; i < 300000; i++)
        sampler_penalty_accept(ps, 9, NULL);
    float out[V];
    sampler_penalty_apply(ps, out, row);
    CHECK(out[9] == (float)(5.0 - 600000.5));
    sampler_penalty_free(ps);
    // an all-NaN row stays NaN, and sampling it still answers -1
    float nans[V];
    for (int v = 0; v < V; v++)
        nans[v] = NAN;
    KgLogitBias one = {3, 100.0f};
    KgPenalties q = {&one, 1, 2.0f, 2.0f, 1.3f};
    ps = penalty_fed(V, &q, all, V, all, V);
    sampler_penalty_apply(ps, nans, nans);
    int still = 1;
    for (int v = 0; v < V; v++)
        still &= isnan(nans[v]);
    Sampler *s = sampler_new(V, 1.0f, 0, 1.0f, 3);
    CHECK(still && sampler_sample(s, nans) == -1);
    sampler_free(s);
    sampler_penalty_free(ps);
    printf("penalties: %d combinations of extreme values on NaN/inf/FLT_MAX rows: no NaN made, "
           "infinities kept\n",
           combos);
}

// Errors, the idle path and a table that grows past thousands of distinct ids.
static void test_penalty_contract(void) {
    SamplerPenalty *ps = (SamplerPenalty *)1;
    char err[KG_ERRLEN];
    KgLogitBias bad_id[2] = {{3, 1.0f}, {10, 1.0f}}, neg_id = {-1, 1.0f}, nan_b = {2, NAN};
    KgPenalties bad[] = {{bad_id, 2, 0, 0, 1},   {&neg_id, 1, 0, 0, 1},     {&nan_b, 1, 0, 0, 1},
                         {NULL, 0, NAN, 0, 1},   {NULL, 0, 0, INFINITY, 1}, {NULL, 0, 0, 0, 0},
                         {NULL, 0, 0, 0, -1.3f}, {NULL, 0, 0, 0, INFINITY}, {NULL, 0, 0, 0, NAN}};
    const int want[] = {KG_ERANGE, KG_ERANGE, KG_EINVAL, KG_EINVAL, KG_EINVAL,
                        KG_EINVAL, KG_EINVAL, KG_EINVAL, KG_EINVAL};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        int rc = sampler_penalty_new(&ps, 10, &bad[i], err);
        CHECK_MSG(rc == want[i] && !ps && err[0], "case %zu: rc %d, err '%s'", i, rc, err);
    }
    // NULL: no penalties; all off: nothing kept, nothing to do
    REQUIRE(sampler_penalty_new(&ps, 10, NULL, err) == KG_OK, "%s", err);
    CHECK(sampler_penalty_prompt(ps, (const int[]){1, 2}, 2, err) == KG_OK);
    CHECK(sampler_penalty_accept(ps, 3, err) == KG_OK);
    CHECK(!sampler_penalty_active(ps) && ps->n_seen == 0 && !sampler_penalty_active(NULL));
    sampler_penalty_free(ps);
    sampler_penalty_free(NULL);
    // repetition alone: active once a prompt is in; out-of-range ids refused, nothing recorded
    KgPenalties rep = {.repetition = 1.3f};
    REQUIRE(sampler_penalty_new(&ps, 10, &rep, err) == KG_OK, "%s", err);
    CHECK(!sampler_penalty_active(ps));
    CHECK(sampler_penalty_prompt(ps, (const int[]){1, 10}, 2, err) == KG_ERANGE);
    CHECK(sampler_penalty_prompt(ps, (const int[]){-1}, 1, err) == KG_ERANGE);
    CHECK(sampler_penalty_accept(ps, 10, err) == KG_ERANGE &&
          sampler_penalty_accept(ps, -2, err) == KG_ERANGE);
    CHECK(ps->n_seen == 0 && !sampler_penalty_active(ps));
    CHECK(sampler_penalty_prompt(ps, (const int[]){1, 1, 4}, 3, err) == KG_OK);
    CHECK(ps->n_seen == 2 && sampler_penalty_active(ps));
    sampler_penalty_free(ps);
    // KoGPT2's vocabulary, 5,000 distinct ids each generated a few times: the table grows
    enum { V = 51200, N = 20000 };
    static int gen[N];
    static float logits[V];
    static double wantv[V];
    uint64_t rng = 77;
    for (size_t i = 0; i < N; i++)
        gen[i] = (int)(rng_uniform(&rng) * 5000) * 10;
    for (size_t v = 0; v < V; v++)
        logits[v] = rng_uniform(&rng) * 20.0f - 10.0f;
    KgPenalties p = {NULL, 0, 0.4f, 0.3f, 1.1f};
    ps = penalty_fed(V, &p, gen, 500, gen + 500, N - 500);
    penalize_ref(wantv, logits, V, gen, 500, gen + 500, N - 500, &p);
    CHECK(penalty_mismatches(ps, logits, wantv, V) == 0);
    CHECK(ps->n_seen <= 5000 && ps->cap >= 2 * ps->n_seen && ps->cap <= 8 * ps->n_seen);
    printf("penalties: bad parameters refused (ERANGE/EINVAL with a message); idle when off; "
           "%zu distinct ids of %d in a table of %zu\n",
           ps->n_seen, V, ps->cap);
    sampler_penalty_free(ps);
}

// logits_entropy: the exact entropy of the whole row (the Explorer's figure), against a direct
// sum in double; uniform rows give log V; NaN and -inf logits count as probability 0.
static void test_entropy(void) {
    enum { V = 1000 };
    static float logits[V];
    uint64_t r = 12345;
    for (size_t i = 0; i < V; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((r >> 40) % 2000) / 100.0f - 10.0f; // -10 .. 10
    }
    const float temps[] = {0.5f, 1.0f, 2.0f};
    for (size_t t = 0; t < 3; t++) {
        double mx = -INFINITY, z = 0, h = 0;
        for (size_t i = 0; i < V; i++)
            mx = fmax(mx, logits[i] / (double)temps[t]);
        for (size_t i = 0; i < V; i++)
            z += exp(logits[i] / (double)temps[t] - mx);
        for (size_t i = 0; i < V; i++) {
            double lp = logits[i] / (double)temps[t] - mx - log(z);
            h -= exp(lp) * lp;
        }
        double got = logits_entropy(logits, V, temps[t]);
        CHECK_MSG(fabs(got - h) < 1e-4, "entropy at T=%g: %.6f, direct %.6f (tolerance 1e-4 nats)",
                  temps[t], got, h);
    }
    float flat[V], spiky[4] = {NAN, -INFINITY, 3000.0f, 3000.0f};
    for (size_t i = 0; i < V; i++)
        flat[i] = 42.0f;
    CHECK(fabs(logits_entropy(flat, V, 1.0f) - log((double)V)) < 1e-5);
    CHECK(fabs(logits_entropy(spiky, 4, 1.0f) - log(2.0)) < 1e-6); // two equal, stable at 3000
}

int main(void) {
    CHECK(fabs(logits_logsumexp((const float[]){1000.0f, 1000.0f}, 2, 1.0f) - (1000 + log(2.0))) <
          1e-3); // stable: no overflow at large logits
    test_topk();
    test_entropy();
    test_sampling();
    test_limits();
    test_penalty_plain();
    test_penalty_torch();
    test_penalty_greedy_loop();
    test_penalty_bias_sampling();
    test_penalty_per_job();
    test_penalty_extremes();
    test_penalty_contract();
    return check_report();
}
