// sampler.h — from logits to next-token choices on the host: seeded sampling with
// temperature, top-k and top-p, and the penalties
// (repetition, frequency/presence, logit_bias) applied to a logits row before sampling.
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "logits.h" // KgCandidate, the top k and the log-sum-exp the sampler uses

typedef struct {
    float temperature; // 0 = greedy (argmax; also below LOGITS_MIN_TEMPERATURE); divides the logits
    size_t top_k;      // 0 = no top-k cut
    float top_p;       // 1 = no nucleus cut; keeps the smallest set with mass >= top_p
    uint64_t rng;      // xorshift64* state; never 0
    KgCandidate *work; // scratch of V candidates
    size_t V;
} Sampler;

// NULL on OOM; seed 0 is allowed (it is remapped). Free with sampler_free().
Sampler *sampler_new(size_t V, float temperature, size_t top_k, float top_p, uint64_t seed);
void sampler_free(Sampler *s);
// Draws one token id from logits (V). Deterministic for a given seed and logits. A NaN or
// -inf logit (a ban: the UTF-8 mask's) is never drawn, a +inf one always is (the best of
// them); -1 when every logit is NaN or -inf: nothing to draw.
int sampler_sample(Sampler *s, const float *logits);

// ---------------------------------------------------------------------------------------
// Penalties. Applied to a logits row before sampler_sample, in the order transformers and
// vLLM use (penalties first, then the warpers), x being logits[id]:
//   1. repetition (CTRL; transformers' RepetitionPenaltyLogitsProcessor): every id seen in the
//      prompt or in the generated tokens, once however often it occurs:
//          x = x < 0 ? x * repetition : x / repetition
//   2. frequency and presence (OpenAI's definition; vLLM's too), over the GENERATED tokens
//      only: count[id] is how often id was generated; the prompt does not count (OpenAI
//      counts the text sampled so far, vLLM the output tokens):
//          x -= frequency * count[id] + presence * (count[id] > 0)
//   3. logit_bias (OpenAI): x += bias[id]
//   4. then sampler_sample: temperature, top-k, top-p.
// A penalty never makes a NaN: NaN stays NaN, -inf stays -inf, +inf stays +inf, and a finite
// logit stays finite or, past float's range, goes to the infinity of its sign.
//
// Use, per job (a state counts one sequence; two jobs never share one):
//   admit:  sampler_penalty_new(&pen, V, &params, err);
//           sampler_penalty_prompt(pen, prompt, n_prompt, err);
//   step:   const float *row = logits; // the model's raw row, left as it is
//           if (sampler_penalty_active(pen)) {
//               sampler_penalty_apply(pen, scratch, logits); // scratch: V floats
//               row = scratch;
//           }
//           id = sampler_sample(sampler, row);
//           sampler_penalty_accept(pen, id, err); // before the next step's apply
//           the logprob of id and the top candidates: from logits, the raw distribution
//           (the engine's choice; penalties shape the draw, never the reported logprobs)

typedef struct {
    int id;     // token id < V
    float bias; // added to the logit; OpenAI allows [-100, 100] (-100 bans, +100 forces)
} KgLogitBias;

typedef struct {
    const KgLogitBias *bias; // n_bias entries, copied by sampler_penalty_new; an id that
    size_t n_bias;           // repeats has its biases added
    float presence;          // OpenAI's range [-2, 2]; 0 = off
    float frequency;         // OpenAI's range [-2, 2]; 0 = off
    float repetition;        // > 0; 1 = off, > 1 discourages repeats, < 1 favours them
} KgPenalties;

// An id seen in the prompt or generated, with how often it was generated (0: prompt only).
typedef struct {
    int id; // -1: an empty slot
    uint32_t generated;
} KgSeenToken;

// One sequence's penalty state; read its fields, change them only through sampler_penalty_*.
// Its size is O(distinct ids seen + n_bias), not O(V).
typedef struct {
    KgLogitBias *bias; // (n_bias) own copy
    size_t n_bias;
    float presence, frequency, repetition;
    KgSeenToken *seen; // (cap) open addressing, linear probing; cap a power of two or 0
    size_t cap, n_seen;
    size_t V;
} SamplerPenalty;

// KG_OK with *out (free with sampler_penalty_free); p NULL means no penalties. KG_ERANGE for
// a bias id not < V; KG_EINVAL for a value that is not a number or infinite, or a repetition
// that is not > 0; KG_ENOMEM. The published ranges ([-2, 2], [-100, 100]) are the caller's to
// enforce; values beyond them are applied as given. p is not kept; *out is NULL on error.
int sampler_penalty_new(SamplerPenalty **out, size_t V, const KgPenalties *p, char *err);
void sampler_penalty_free(SamplerPenalty *ps);

// Feed the prompt's ids (they count for repetition only) and then each generated id (it
// counts for all). KG_OK; KG_ERANGE when an id is not < V, KG_ENOMEM: then nothing of that
// call is recorded. O(1) amortized per id, and nothing is kept when no penalty would use it
// (repetition 1 for the prompt; also frequency and presence 0 for generated ids).
int sampler_penalty_prompt(SamplerPenalty *ps, const int *ids, size_t n, char *err);
int sampler_penalty_accept(SamplerPenalty *ps, int id, char *err);

// 1 when sampler_penalty_apply may change a logit of the next row, 0 when it would only copy
// it: the caller then samples from the raw row. NULL is no penalties (0).
int sampler_penalty_active(const SamplerPenalty *ps);

// out (V) = logits (V) with the penalties applied in the order above. out may be logits itself
// (in place), or a buffer that does not overlap it: the engine keeps the raw row, whose
// logprobs it reports, and passes a scratch row (one per engine thread is enough). Costs one
// copy of V floats when out != logits, plus O(distinct ids seen + n_bias).
void sampler_penalty_apply(const SamplerPenalty *ps, float *out, const float *logits);

#endif
