// sampler.h — from logits to next-token choices on the host: stable log-softmax, top-k in
// one O(V) pass, and seeded sampling with temperature, top-k and top-p.
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int id;
    float logit;   // raw, before temperature
    float prob;    // softmax over the whole vocabulary of logit / temperature
    float logprob; // its natural log, computed as logit/temperature - logsumexp (no log(prob))
} KgCandidate;

// Temperatures below this act as their limit: sampling is greedy, and the probabilities
// sampler_topk and sampler_logsumexp compute are those of this temperature (all the mass on
// the best logit unless others are within ~1e-4 of it). Smaller ones would overflow 1 / T.
#define SAMPLER_MIN_TEMPERATURE 1e-4f

// A temperature in the range the arithmetic takes: below SAMPLER_MIN_TEMPERATURE (or NaN),
// that minimum.
float sampler_usable_temperature(float temperature);

// log(sum_i exp(logits[i] / temperature)) over V logits, stable (max subtracted first).
// A NaN logit counts as probability 0.
double sampler_logsumexp(const float *logits, size_t V, float temperature);

// The k most probable tokens (k <= V), highest first, ties broken by lower id, NaN logits
// last, with their full-vocabulary probabilities. One pass over V with a k-sized min-heap.
// temperature must be > 0 (1 = the raw distribution). Returns the count written (min(k, V)).
size_t sampler_topk(const float *logits, size_t V, float temperature, size_t k, KgCandidate *out);

typedef struct {
    float
        temperature; // 0 = greedy (argmax; also below SAMPLER_MIN_TEMPERATURE); divides the logits
    size_t top_k;    // 0 = no top-k cut
    float top_p;     // 1 = no nucleus cut; keeps the smallest set with mass >= top_p
    uint64_t rng;    // xorshift64* state; never 0
    KgCandidate *work; // scratch of V candidates
    size_t V;
} Sampler;

// NULL on OOM; seed 0 is allowed (it is remapped). Free with sampler_free().
Sampler *sampler_new(size_t V, float temperature, size_t top_k, float top_p, uint64_t seed);
void sampler_free(Sampler *s);
// Draws one token id from logits (V). Deterministic for a given seed and logits. A NaN logit
// is never drawn, a +inf one always is (the best of them); -1 when no logit is a number.
int sampler_sample(Sampler *s, const float *logits);

#endif
