// test_model_sampler — top-k, log-softmax and sampling against brute-force references:
// top-k equals a full sort (ties by lower id); logprobs equal a double-precision log-softmax
// (tolerance 1e-5); sampled frequencies match the distribution the parameters define
// (temperature, top-k, top-p) within 4 standard errors; greedy is argmax; a seed repeats.
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    size_t k = sampler_topk(logits, V, 1.0f, 50, c);
    int same = k == 50;
    for (size_t i = 0; same && i < k; i++)
        same = c[i].id == ids[i];
    CHECK_MSG(same, "top-50 differs from a full sort");
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
    sampler_topk(logits, V, 0.7f, 5, c);
    for (int i = 0; i < 5; i++)
        CHECK(fabs(c[i].logprob - log(p[c[i].id])) <= 1e-5);
    CHECK(sampler_topk(logits, 3, 1.0f, 10, c) == 3); // k > V
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
    sampler_topk(logits, V, 1e-40f, 5, c);
    CHECK(c[0].id == best && fabsf(c[0].prob - 1.0f) < 1e-6f && !isnan(c[4].prob));
    CHECK(isfinite(sampler_logsumexp(logits, V, 1e-40f)));

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
    CHECK(isfinite(sampler_logsumexp(odd, V, 1.0f)));
    KgCandidate all[50];
    sampler_topk(odd, V, 1.0f, V, all);
    int order_ok = 1;
    for (size_t i = 0; i < V; i++) // the 33 numbers first, then the 17 NaNs
        order_ok &= (i < 33) == !isnan(all[i].logit);
    CHECK_MSG(order_ok, "top-k does not rank NaN logits last");
    // all NaN: nothing to draw (-1), greedy too; a +inf logit takes every draw; all -inf but
    // NaNs: some non-NaN id
    for (size_t i = 0; i < V; i++)
        odd[i] = NAN;
    Sampler *g = sampler_new(V, 0.0f, 0, 1.0f, 8), *s = sampler_new(V, 1.0f, 0, 0.9f, 8);
    CHECK(sampler_sample(g, odd) == -1 && sampler_sample(s, odd) == -1);
    odd[17] = INFINITY;
    odd[3] = 1.0f;
    CHECK(sampler_sample(g, odd) == 17 && sampler_sample(s, odd) == 17);
    odd[17] = -INFINITY;
    odd[3] = -INFINITY;
    int id = sampler_sample(s, odd);
    CHECK(id == 3 || id == 17);
    sampler_free(g);
    sampler_free(s);
    printf("limits: tiny temperatures and top_p act as greedy; NaN logits never drawn\n");
}

int main(void) {
    CHECK(fabs(sampler_logsumexp((const float[]){1000.0f, 1000.0f}, 2, 1.0f) - (1000 + log(2.0))) <
          1e-3); // stable: no overflow at large logits
    test_topk();
    test_sampling();
    test_limits();
    return check_report();
}
