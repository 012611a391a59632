// logits.h — host math on one row of V logits: its log-sum-exp, its entropy, its k most
// probable tokens and a token's rank among them all. The CPU backend's logits_topk is logits_topk
// itself; the CUDA backend's is checked against it and falls back to it for a k beyond its kernel;
// the sampler and the engine use it on the rows they hold. It sits beside backend.h (KgCandidate)
// and kgmath.h, below the backends and the graph, and depends on nothing above them.
#ifndef LOGITS_H
#define LOGITS_H

#include <stddef.h>

#include "backend.h" // KgCandidate

// Temperatures below this act as their limit: sampling is greedy, and the probabilities
// logits_topk and logits_logsumexp compute are those of this temperature (all the mass on
// the best logit unless others are within ~1e-4 of it). Smaller ones would overflow 1 / T.
#define LOGITS_MIN_TEMPERATURE 1e-4f

// A temperature in the range the arithmetic takes: below LOGITS_MIN_TEMPERATURE (or NaN),
// that minimum.
float logits_usable_temperature(float temperature);

// log(sum_i exp(logits[i] / temperature)) over V logits, stable (max subtracted first).
// A NaN logit counts as probability 0.
double logits_logsumexp(const float *logits, size_t V, float temperature);

// The entropy in nats of softmax(logits / temperature) over all V logits, exact (not bounded
// from a top k), stable (max subtracted first): H = log S - W / S with a_i = (logit_i - max) / T,
// S = sum e^a_i, W = sum a_i e^a_i, summed in double. A NaN logit counts as probability 0; all
// NaN gives 0.
double logits_entropy(const float *logits, size_t V, float temperature);

// 1 when a ranks before b: higher logit, then lower id; a NaN logit ranks after every number
// (the order stays total, so heaps and sorts over candidates stay consistent).
int logits_ranks_before(const KgCandidate *a, const KgCandidate *b);

// Token id's rank among all V logits in logits_ranks_before's order: 1 + how many tokens rank
// before it (1 = the most probable). Exact over the whole row, one O(V) pass with no sort:
// cheaper than the log-sum-exp beside it.
size_t logits_rank(const float *logits, size_t V, int id);

// The k most probable tokens (k <= V), highest first, ties broken by lower id, NaN logits
// last, with their full-vocabulary probabilities. One pass over V with a k-sized min-heap.
// temperature must be > 0 (1 = the raw distribution). Returns the count written (min(k, V)).
size_t logits_topk(const float *logits, size_t V, float temperature, size_t k, KgCandidate *out);

#endif
