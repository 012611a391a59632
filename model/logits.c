// logits.c — one row of logits on the host: log-sum-exp, entropy, top k, rank (logits.h).
#include "logits.h"

#include <math.h>
#include <stdlib.h>

#include "kgmath.h"

float logits_usable_temperature(float temperature) {
    return temperature >= LOGITS_MIN_TEMPERATURE ? temperature : LOGITS_MIN_TEMPERATURE;
}

double logits_logsumexp(const float *logits, size_t V, float temperature) {
    float inv_t = 1.0f / logits_usable_temperature(temperature);
    float mx = -INFINITY;
    for (size_t i = 0; i < V; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    // eight independent partial sums: a loop the compiler can vectorize without reordering
    // a NaN logit adds nothing (kg_expf passes NaN through; the select drops it)
    float part[8] = {0};
    size_t i = 0;
    for (; i + 8 <= V; i += 8)
        for (int k = 0; k < 8; k++) {
            float e = kg_expf((logits[i + k] - mx) * inv_t);
            part[k] += e == e ? e : 0.0f;
        }
    double sum = 0;
    for (; i < V; i++) {
        float e = kg_expf((logits[i] - mx) * inv_t);
        sum += e == e ? e : 0.0f;
    }
    for (int k = 0; k < 8; k++)
        sum += part[k];
    return (double)mx * inv_t + log(sum);
}

double logits_entropy(const float *logits, size_t V, float temperature) {
    float inv_t = 1.0f / logits_usable_temperature(temperature);
    float mx = -INFINITY;
    for (size_t i = 0; i < V; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0, weighted = 0;
    for (size_t i = 0; i < V; i++) {
        float a = (logits[i] - mx) * inv_t;
        if (!(a > -80.0f)) continue; // NaN, -inf, and shares below e^-80 that add nothing
        float e = kg_expf(a);        // the same exp as the probabilities logits_topk reports
        sum += e;
        weighted += (double)a * e;
    }
    return sum > 0 ? log(sum) - weighted / sum : 0.0;
}

int logits_ranks_before(const KgCandidate *a, const KgCandidate *b) {
    if (isnan(a->logit) || isnan(b->logit))
        return isnan(b->logit) && (!isnan(a->logit) || a->id < b->id);
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

size_t logits_rank(const float *logits, size_t V, int id) {
    float x = logits[id];
    size_t before = 0;
    if (isnan(x)) { // after every number, and after the NaNs of lower ids
        for (size_t i = 0; i < V; i++)
            before += !isnan(logits[i]) || i < (size_t)id;
        return before + 1;
    }
    // a NaN compares false: it never ranks before a number
    for (size_t i = 0; i < V; i++)
        before += logits[i] > x || (logits[i] == x && i < (size_t)id);
    return before + 1;
}

// Min-heap on rank: heap[0] is the weakest of the k kept so far.
static void sift_down(KgCandidate *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && logits_ranks_before(&h[m], &h[l])) m = l;
        if (r < n && logits_ranks_before(&h[m], &h[r])) m = r;
        if (m == i) return;
        KgCandidate t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static int cmp_rank(const void *a, const void *b) {
    return logits_ranks_before(a, b) ? -1 : logits_ranks_before(b, a) ? 1 : 0;
}

size_t logits_topk(const float *logits, size_t V, float temperature, size_t k, KgCandidate *out) {
    if (k > V) k = V;
    if (k == 0) return 0;
    for (size_t i = 0; i < k; i++)
        out[i] = (KgCandidate){.id = (int)i, .logit = logits[i]};
    for (size_t i = k / 2; i-- > 0;)
        sift_down(out, k, i);
    for (size_t i = k; i < V; i++) {
        KgCandidate c = {.id = (int)i, .logit = logits[i]};
        if (logits_ranks_before(&c, &out[0])) {
            out[0] = c;
            sift_down(out, k, 0);
        }
    }
    qsort(out, k, sizeof *out, cmp_rank);
    // logit x inv_t as logits_logsumexp forms it (a float's product is exact in double), so
    // that the max's share cancels exactly however small the temperature
    double inv_t = 1.0f / logits_usable_temperature(temperature);
    double lse = logits_logsumexp(logits, V, temperature);
    for (size_t i = 0; i < k; i++) {
        out[i].logprob = (float)((double)out[i].logit * inv_t - lse);
        out[i].prob = expf(out[i].logprob);
    }
    return k;
}
