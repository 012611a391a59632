// test_model_logits.c — model/logits.c, the host math on one row of logits that the CPU
// backend's top k, the sampler, /v1/score's ranks and the Explorer's entropy stand on (issue 33
// item 6: reached only end to end before). Two kinds of reference, neither this code:
//   - rows whose answers are known by hand: log 2, log 10, probabilities 0.1..0.4, ties, NaNs,
//     a temperature that squares the odds, one below the floor;
//   - a straightforward reference on random rows of KoGPT2's V = 51,200: log-sum-exp in long
//     double over every logit, entropy from its probabilities, top k and ranks from a full
//     qsort of (logit descending, id ascending).
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "model/logits.h"

#define V_BIG 51200

// Tolerances. Hand cases: 1e-6, kg_expf is about 1 ulp and the rows are a few terms.
// Random rows: logits_logsumexp adds float exponentials in 8 partial sums of V/8 terms, each
// term ~1 ulp and each addition half an ulp of its running sum, so its relative error is at
// most ~(V/8) * 2^-24 = 4e-4 (random-walk typical: ~sqrt(V/8) * 2^-24 = 5e-6): lse within 4e-4.
#define TOL_HAND 1e-6
#define TOL_LSE  4e-4

typedef struct {
    float logit;
    int id;
} RefItem;

// the order of a full sort: higher logit first, then lower id; NaN after every number
static int ref_cmp(const void *pa, const void *pb) {
    const RefItem *a = pa, *b = pb;
    int na = isnan(a->logit), nb = isnan(b->logit);
    if (na != nb) return na - nb;
    if (!na && a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

// log(sum exp(x / T)) in long double, NaN logits left out, no tricks beyond the max
static long double ref_logsumexp(const float *x, size_t V, double T) {
    long double mx = -INFINITY, s = 0;
    for (size_t i = 0; i < V; i++)
        if (!isnan(x[i]) && x[i] / T > mx) mx = x[i] / T;
    for (size_t i = 0; i < V; i++)
        if (!isnan(x[i])) s += expl(x[i] / T - mx);
    return mx + logl(s);
}

// -sum p log p with p = exp(x / T - lse), in long double
static long double ref_entropy(const float *x, size_t V, double T) {
    long double lse = ref_logsumexp(x, V, T), h = 0;
    for (size_t i = 0; i < V; i++) {
        if (isnan(x[i])) continue;
        long double lp = x[i] / T - lse, p = expl(lp);
        if (p > 0) h -= p * lp;
    }
    return h;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double rng_uniform(void) { // xorshift64*, [0, 1)
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static void test_hand(void) {
    KgCandidate c[8];
    float two[2] = {0.0f, 0.0f};
    CHECK(fabs(logits_logsumexp(two, 2, 1.0f) - log(2.0)) < TOL_HAND);
    CHECK(fabs(logits_entropy(two, 2, 1.0f) - log(2.0)) < TOL_HAND);

    // logits log 1..log 4: probabilities 0.1, 0.2, 0.3, 0.4, log-sum-exp log 10
    float four[4] = {logf(1), logf(2), logf(3), logf(4)};
    double h4 = -(0.1 * log(0.1) + 0.2 * log(0.2) + 0.3 * log(0.3) + 0.4 * log(0.4));
    CHECK(fabs(logits_logsumexp(four, 4, 1.0f) - log(10.0)) < TOL_HAND);
    CHECK(fabs(logits_entropy(four, 4, 1.0f) - h4) < TOL_HAND);
    CHECK(logits_topk(four, 4, 1.0f, 2, c) == 2);
    CHECK(c[0].id == 3 && c[1].id == 2);
    CHECK(fabs(c[0].prob - 0.4) < TOL_HAND && fabs(c[1].prob - 0.3) < TOL_HAND);
    CHECK(fabs(c[0].logprob - log(0.4)) < TOL_HAND && c[0].logit == four[3]);
    CHECK(logits_topk(four, 4, 1.0f, 8, c) == 4); // k past V: all of them
    CHECK(c[3].id == 0 && fabs(c[3].prob - 0.1) < TOL_HAND);
    CHECK(logits_topk(four, 4, 1.0f, 0, c) == 0);
    CHECK(logits_rank(four, 4, 3) == 1 && logits_rank(four, 4, 0) == 4);

    // temperature 0.5 squares the odds: logits 0, log 3 give 1 : 9
    float odds[2] = {0.0f, logf(3)};
    CHECK(logits_topk(odds, 2, 0.5f, 2, c) == 2);
    CHECK(c[0].id == 1 && fabs(c[0].prob - 0.9) < TOL_HAND && fabs(c[1].prob - 0.1) < TOL_HAND);
    CHECK(fabs(logits_logsumexp(odds, 2, 0.5f) - log(10.0)) < TOL_HAND);

    // a temperature below the floor acts as LOGITS_MIN_TEMPERATURE: logits 0 and 1 are
    // e^10000 apart, so all the mass is on id 1 (and NaN is no temperature at all)
    float gap[2] = {0.0f, 1.0f};
    CHECK(logits_usable_temperature(1e-30f) == LOGITS_MIN_TEMPERATURE);
    CHECK(logits_usable_temperature(NAN) == LOGITS_MIN_TEMPERATURE);
    CHECK(logits_usable_temperature(0.7f) == 0.7f);
    CHECK(logits_topk(gap, 2, 1e-30f, 2, c) == 2);
    CHECK(c[0].id == 1 && c[0].prob == 1.0f && c[1].prob == 0.0f);
    CHECK(fabs(logits_logsumexp(gap, 2, 1e-30f) - 1.0 / LOGITS_MIN_TEMPERATURE) < 1e-3);

    // ties: equal logits rank by id, each 1/V
    float flat[5] = {2.5f, 2.5f, 2.5f, 2.5f, 2.5f};
    CHECK(logits_topk(flat, 5, 1.0f, 3, c) == 3);
    CHECK(c[0].id == 0 && c[1].id == 1 && c[2].id == 2 && fabs(c[2].prob - 0.2) < TOL_HAND);
    CHECK(logits_rank(flat, 5, 4) == 5 && logits_rank(flat, 5, 0) == 1);
    CHECK(fabs(logits_entropy(flat, 5, 1.0f) - log(5.0)) < TOL_HAND);

    // a NaN logit is probability 0 and ranks after every number (NaNs by id among themselves)
    float nan3[4] = {NAN, 1.0f, NAN, 1.0f};
    CHECK(fabs(logits_logsumexp(nan3, 4, 1.0f) - (1.0 + log(2.0))) < TOL_HAND);
    CHECK(fabs(logits_entropy(nan3, 4, 1.0f) - log(2.0)) < TOL_HAND);
    CHECK(logits_topk(nan3, 4, 1.0f, 4, c) == 4);
    CHECK(c[0].id == 1 && c[1].id == 3 && c[2].id == 0 && c[3].id == 2);
    CHECK(fabs(c[0].prob - 0.5) < TOL_HAND);
    CHECK(logits_rank(nan3, 4, 0) == 3 && logits_rank(nan3, 4, 2) == 4);
    CHECK(logits_rank(nan3, 4, 3) == 2);
    KgCandidate a = {.id = 7, .logit = 1.0f}, b = {.id = 3, .logit = NAN};
    CHECK(logits_ranks_before(&a, &b) && !logits_ranks_before(&b, &a));
    float all_nan[2] = {NAN, NAN};
    CHECK(logits_entropy(all_nan, 2, 1.0f) == 0.0);
}

// One random row of V_BIG logits (a spread like a trained model's: N(0, 3) plus a few
// outliers, and a planted tie) against the full-sort and long-double references.
static void test_random_row(float T, size_t k, float *x, RefItem *ref, KgCandidate *c) {
    for (size_t i = 0; i < V_BIG; i++) {
        double u1 = rng_uniform() + 1e-12, u2 = rng_uniform();
        x[i] = (float)(3.0 * sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2));
    }
    x[123] = x[40000] = 20.0f; // a tie at the top: id 123 first
    x[7] = 17.5f;
    for (size_t i = 0; i < V_BIG; i++)
        ref[i] = (RefItem){x[i], (int)i};
    qsort(ref, V_BIG, sizeof *ref, ref_cmp);
    long double lse = ref_logsumexp(x, V_BIG, T);
    double got = logits_logsumexp(x, V_BIG, T);
    CHECK_MSG(fabsl(got - lse) <= TOL_LSE, "T %g: logsumexp %.9f, reference %.9Lf", T, got, lse);
    long double h = ref_entropy(x, V_BIG, T);
    double gh = logits_entropy(x, V_BIG, T);
    CHECK_MSG(fabsl(gh - h) <= TOL_LSE, "T %g: entropy %.9f, reference %.9Lf", T, gh, h);

    size_t n = logits_topk(x, V_BIG, T, k, c);
    CHECK(n == k);
    int ids_ok = 1, probs_ok = 1;
    double worst = 0;
    for (size_t r = 0; r < n; r++) {
        ids_ok &= c[r].id == ref[r].id;
        long double p = expl(ref[r].logit / (long double)T - lse);
        double err = fabsl(c[r].prob - p) / p;
        worst = err > worst ? err : worst;
        probs_ok &= err <= TOL_LSE; // exp(lse error): the same relative bound
    }
    CHECK_MSG(ids_ok, "T %g k %zu: the top-k ids differ from the full sort's", T, k);
    CHECK_MSG(probs_ok, "T %g k %zu: worst relative prob error %.3g", T, k, worst);
    for (size_t r = 0; r < 50; r++) { // ranks: the full sort's positions, at the top and deep
        size_t at = r < 25 ? r : (size_t)(rng_uniform() * V_BIG);
        CHECK_MSG(logits_rank(x, V_BIG, ref[at].id) == at + 1, "rank of id %d: %zu, want %zu",
                  ref[at].id, logits_rank(x, V_BIG, ref[at].id), at + 1);
    }
    printf("T %.1f k %3zu: |lse - ref| %.2e, |H - ref| %.2e, top-k ids equal the full sort's, "
           "worst relative prob error %.2e\n",
           T, k, (double)fabsl(got - lse), (double)fabsl(gh - h), worst);
}

int main(void) {
    test_hand();
    float *x = malloc(V_BIG * sizeof *x);
    RefItem *ref = malloc(V_BIG * sizeof *ref);
    KgCandidate *c = malloc(100 * sizeof *c);
    REQUIRE(x && ref && c, "out of memory");
    const float temps[3] = {1.0f, 0.7f, 2.0f};
    const size_t ks[3] = {1, 10, 100};
    for (int t = 0; t < 3; t++)
        test_random_row(temps[t], ks[t], x, ref, c);
    free(x);
    free(ref);
    free(c);
    return check_report();
}
