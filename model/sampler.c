#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "kgmath.h"

Sampler *sampler_new(size_t V, float temperature, size_t top_k, float top_p, uint64_t seed) {
    Sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->work = malloc(V * sizeof *s->work);
    if (!s->work) {
        free(s);
        return NULL;
    }
    s->V = V;
    s->temperature = temperature >= LOGITS_MIN_TEMPERATURE ? temperature : 0.0f; // else greedy
    s->top_k = top_k;
    s->top_p = top_p;
    // splitmix64 of the seed: any seed, 0 included, gives a good non-zero xorshift state
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s->rng = (z ^ (z >> 31)) | 1;
    return s;
}

void sampler_free(Sampler *s) {
    if (!s) return;
    free(s->work);
    free(s);
}

// xorshift64*: uniform in [0, 1) with 24 bits, as a float's mantissa holds
static float rng_uniform(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (float)((x * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

// Max-heap on rank (the best candidate at the root).
static void sift_down_max(KgCandidate *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && logits_ranks_before(&h[l], &h[m])) m = l;
        if (r < n && logits_ranks_before(&h[r], &h[m])) m = r;
        if (m == i) return;
        KgCandidate t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

// Reorders c[0..n) so that its first k entries are the nucleus, best first: the smallest set
// of most probable tokens whose mass reaches top_p. Pops a heap only as far as needed, so a
// peaked distribution costs O(n), not a sort. Returns k.
static size_t nucleus(KgCandidate *c, size_t n, float top_p) {
    for (size_t i = n / 2; i-- > 0;)
        sift_down_max(c, n, i);
    double mass = 0;
    size_t k = 0, heap = n;
    // at least the best one: a top_p at (or rounded to) 0 keeps only it
    while (heap && (k == 0 || mass < top_p)) { // move the heap's best to the end of its region
        KgCandidate best = c[0];
        c[0] = c[--heap];
        sift_down_max(c, heap, 0);
        c[heap] = best; // popped entries collect at the end, best last
        mass += best.prob;
        k++;
    }
    for (size_t i = 0; i < k; i++) { // bring them to the front, best first
        KgCandidate t = c[i];
        c[i] = c[n - 1 - i];
        c[n - 1 - i] = t;
    }
    return k;
}

// Draws from the candidates c[0..n) (probabilities need not sum to 1) with u in [0, 1); the
// first one when their mass is not a positive number, -1 when there are none.
static int draw(const KgCandidate *c, size_t n, float u) {
    double total = 0, acc = 0;
    for (size_t i = 0; i < n; i++)
        total += c[i].prob;
    if (n == 0) return -1;
    if (!(total > 0)) return c[0].id;
    double r = u * total;
    for (size_t i = 0; i < n; i++) {
        acc += c[i].prob;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}

// The index of the largest logit, the lowest of equals, NaN and -inf skipped; -1 when all
// are NaN or -inf.
static int argmax(const float *logits, size_t V) {
    int best = -1;
    for (size_t i = 0; i < V; i++)
        if (logits[i] > -INFINITY && (best < 0 || logits[i] > logits[best])) best = (int)i;
    return best;
}

// Where softmax has no numbers to give, the draw is the best logit's: a +inf one (it takes
// all the mass), or none (-1) when every logit is NaN or -inf: a -inf is a ban (the UTF-8
// mask's), so a row of bans and NaNs (a broken model under the mask) has nothing to draw. The
// sampling paths find these from what they compute anyway (the best of the top k; a log-sum-
// exp that is not finite), so a normal step makes no extra pass over the logits.
int sampler_sample(Sampler *s, const float *logits) {
    const size_t V = s->V;
    if (s->temperature <= 0.0f) return argmax(logits, V);
    size_t n;
    if (s->top_k && s->top_k < V) { // the k best, with full-vocabulary probabilities
        n = logits_topk(logits, V, s->temperature, s->top_k, s->work);
        if (!isfinite(s->work[0].logit)) return s->work[0].logit == INFINITY ? s->work[0].id : -1;
    } else {
        double lse_d = logits_logsumexp(logits, V, s->temperature);
        if (!isfinite(lse_d)) return argmax(logits, V);
        float lse = (float)lse_d, inv_t = 1.0f / s->temperature;
        // tokens outside the nucleus all have p < (1 - top_p) / V: their total mass is below
        // 1 - top_p, so the nucleus lies among the rest and only those are kept
        float floor_p = s->top_p < 1.0f ? (1.0f - s->top_p) / (float)V : 0.0f;
        n = 0;
        for (size_t i = 0; i < V; i++) {
            float p = kg_expf(logits[i] * inv_t - lse);
            if (p >= floor_p)
                s->work[n++] = (KgCandidate){.id = (int)i, .logit = logits[i], .prob = p};
        }
    }
    if (s->top_p < 1.0f) n = nucleus(s->work, n, s->top_p);
    return draw(s->work, n, rng_uniform(&s->rng));
}

// ---------------------------------------------------------------------------------------
// Penalties

int sampler_penalty_new(SamplerPenalty **out, size_t V, const KgPenalties *p, char *err) {
    *out = NULL;
    KgPenalties none = {.repetition = 1.0f};
    if (!p) p = &none;
    if (!isfinite(p->presence) || !isfinite(p->frequency) || !isfinite(p->repetition) ||
        !(p->repetition > 0))
        return kg_err(err, KG_EINVAL,
                      "penalties: presence %g, frequency %g, repetition %g "
                      "(finite numbers, repetition > 0)",
                      p->presence, p->frequency, p->repetition);
    for (size_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].id < 0 || (size_t)p->bias[i].id >= V)
            return kg_err(err, KG_ERANGE, "logit_bias: token id %d is not < %zu", p->bias[i].id, V);
        if (!isfinite(p->bias[i].bias))
            return kg_err(err, KG_EINVAL, "logit_bias: token %d: bias %g is not finite",
                          p->bias[i].id, p->bias[i].bias);
    }
    SamplerPenalty *ps = calloc(1, sizeof *ps);
    if (!ps) return kg_err(err, KG_ENOMEM, "penalties: out of memory");
    if (p->n_bias) {
        ps->bias = malloc(p->n_bias * sizeof *ps->bias);
        if (!ps->bias) {
            free(ps);
            return kg_err(err, KG_ENOMEM, "penalties: out of memory");
        }
        memcpy(ps->bias, p->bias, p->n_bias * sizeof *ps->bias);
    }
    ps->n_bias = p->n_bias;
    ps->presence = p->presence;
    ps->frequency = p->frequency;
    ps->repetition = p->repetition;
    ps->V = V;
    *out = ps;
    return KG_OK;
}

void sampler_penalty_free(SamplerPenalty *ps) {
    if (!ps) return;
    free(ps->bias);
    free(ps->seen);
    free(ps);
}

// The slot of id in the table: its entry, or the empty slot where it would go (cap > 0 and
// at least one slot empty).
static KgSeenToken *seen_slot(KgSeenToken *t, size_t cap, int id) {
    uint32_t h = (uint32_t)id; // murmur3's finalizer: consecutive ids spread over the table
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    size_t i = h & (cap - 1);
    while (t[i].id >= 0 && t[i].id != id)
        i = (i + 1) & (cap - 1);
    return &t[i];
}

// Room for n_more new ids at a load of at most 1/2. KG_OK or KG_ENOMEM (table unchanged).
static int seen_reserve(SamplerPenalty *ps, size_t n_more) {
    size_t need = ps->n_seen + n_more, cap = ps->cap ? ps->cap : 64;
    if (need > ps->V) need = ps->V; // there are no more distinct ids than that
    while (cap < 2 * need + 1)
        cap *= 2;
    if (cap == ps->cap) return KG_OK;
    KgSeenToken *t = malloc(cap * sizeof *t);
    if (!t) return KG_ENOMEM;
    for (size_t i = 0; i < cap; i++)
        t[i] = (KgSeenToken){.id = -1};
    for (size_t i = 0; i < ps->cap; i++)
        if (ps->seen[i].id >= 0) *seen_slot(t, cap, ps->seen[i].id) = ps->seen[i];
    free(ps->seen);
    ps->seen = t;
    ps->cap = cap;
    return KG_OK;
}

// Records id (< V, room reserved); the entry.
static KgSeenToken *seen_add(SamplerPenalty *ps, int id) {
    KgSeenToken *e = seen_slot(ps->seen, ps->cap, id);
    if (e->id < 0) {
        *e = (KgSeenToken){.id = id};
        ps->n_seen++;
    }
    return e;
}

int sampler_penalty_prompt(SamplerPenalty *ps, const int *ids, size_t n, char *err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= ps->V)
            return kg_err(err, KG_ERANGE, "prompt token %d is not < %zu", ids[i], ps->V);
    if (ps->repetition == 1.0f || n == 0) return KG_OK; // only repetition looks at the prompt
    if (seen_reserve(ps, n)) return kg_err(err, KG_ENOMEM, "penalties: out of memory");
    for (size_t i = 0; i < n; i++)
        seen_add(ps, ids[i]);
    return KG_OK;
}

int sampler_penalty_accept(SamplerPenalty *ps, int id, char *err) {
    if (id < 0 || (size_t)id >= ps->V)
        return kg_err(err, KG_ERANGE, "generated token %d is not < %zu", id, ps->V);
    if (ps->repetition == 1.0f && ps->presence == 0.0f && ps->frequency == 0.0f) return KG_OK;
    if (seen_reserve(ps, 1)) return kg_err(err, KG_ENOMEM, "penalties: out of memory");
    KgSeenToken *e = seen_add(ps, id);
    if (e->generated < UINT32_MAX) e->generated++;
    return KG_OK;
}

int sampler_penalty_active(const SamplerPenalty *ps) {
    return ps && (ps->n_bias || ps->n_seen); // n_seen > 0 only when some penalty uses it
}

void sampler_penalty_apply(const SamplerPenalty *ps, float *out, const float *logits) {
    if (out != logits) memcpy(out, logits, ps->V * sizeof *out);
    const float r = ps->repetition;
    for (size_t i = 0; i < ps->cap; i++) {
        const KgSeenToken *e = &ps->seen[i];
        if (e->id < 0) continue;
        float x = out[e->id];
        if (r != 1.0f) x = x < 0 ? x * r : x / r; // 1. repetition: prompt and generated
        if (e->generated) {                       // 2. frequency/presence: generated only
            // in double: the term stays finite for any finite parameters, so an infinite
            // logit minus it stays infinite (never inf - inf)
            double d = (double)ps->frequency * e->generated + ps->presence;
            x = (float)(x - d);
        }
        out[e->id] = x;
    }
    for (size_t i = 0; i < ps->n_bias; i++) // 3. logit_bias
        out[ps->bias[i].id] += ps->bias[i].bias;
}
