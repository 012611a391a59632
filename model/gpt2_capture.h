// gpt2_capture.h — how one prediction was made, kept from the ordinary forward passes: the
// logit lens (each block's residual stream read through the final layer norm and the LM head)
// and the attention view (each layer's attention from one position over the ones before it).
//
// A sequence that carries a capture (Gpt2State.captures) has, in each gpt2_forward pass that
// holds its position lens_pos, the residual stream x there copied after the embedding and
// after every block (the lens); and, in each pass that holds any of its positions 0..att_pos,
// every layer's key rows of those positions and the query row of att_pos (the attention
// view), copied from the qkv buffer the attention op reads in that pass. Nothing about how the
// KV cache stores keys is assumed, so the attention view needs positions 0..att_pos to run in
// the sequence's own passes (its prompt fed from position 0, no cached prefix); the lens needs
// only lens_pos itself. The copies stay in backend memory until the passes are over.
//
// Afterwards, on any backend by the same code: the lens is ln_f and the LM head over the L+1
// captured rows (the backend's own ops, as the forward's last step), its logits brought to the
// host; the attention is softmax(q . k / sqrt(hs)) per layer and head on the host, from the
// captured q and k (what the attention op computes; transformers' output_attentions).
//
// Shapes: L layers, C channels, NH heads, hs = C / NH, V vocabulary, P = att_pos + 1 positions.
// Stages: 0 is the embedding (wte + wpe), l + 1 the residual stream after block l.
#ifndef GPT2_CAPTURE_H
#define GPT2_CAPTURE_H

#include <stddef.h>

#include "gpt2.h"

struct Gpt2Capture {
    int lens; // keep x at lens_pos at every stage
    size_t lens_pos;
    int attention; // keep q at att_pos and k at 0..att_pos in every layer
    size_t att_pos;
    float *resid;  // backend (L + 1, C): x at lens_pos, a row per stage
    float *q;      // backend (L, C): each layer's query at att_pos, before the 1 / sqrt(hs) scale
    float *k;      // backend (L, P, C): each layer's keys at 0..att_pos
    size_t k_next; // keys captured for positions 0 .. k_next-1 (each pass must go on from it)
    int k_gap;     // a pass started past k_next (a cached prefix): the keys are incomplete
    int resid_set; // lens_pos went through a pass
};

// A capture with the lens at lens_pos and/or the attention view at att_pos (at least one of
// the two; positions < n_ctx). KG_OK, or KG_EINVAL (a position out of range, nothing asked) or
// KG_ENOMEM with err filled. The backend memory it holds: (L + 1) C floats for the lens,
// (L + L P) C for the attention. Free with gpt2_capture_free(). Used by one thread at a time,
// as the state it runs with.
int gpt2_capture_init(Gpt2Capture *c, const Gpt2 *m, int lens, size_t lens_pos, int attention,
                      size_t att_pos, char *err);
void gpt2_capture_free(Gpt2Capture *c, const Gpt2 *m);

// The forward's hook: for every one of the n_seq sequences of the pass that carries a capture
// (s->captures), copies what it keeps from this point of the pass. stage 0 comes right after
// the embedding; stage l + 1 at the end of block l, when s->x is the residual stream after it
// and s->qkv still holds block l's q, k, v. Rows come from s->attn (each sequence's first row
// and position). Called by gpt2_forward.
void gpt2_capture_stage(const Gpt2 *m, const Gpt2State *s, size_t n_seq, size_t stage);

// The logit lens of a capture, at temperature 1 over the first V ids (V <= vocab_size: the
// engine leaves out rows the tokenizer cannot spell).
typedef struct {
    size_t n_stages;  // L + 1
    size_t k;         // top tokens per stage
    KgCandidate *top; // (n_stages, k) best first (logits_topk's order and probabilities)
    size_t n_tracked;
    int *tracked;   // (n_tracked) ids followed through every stage
    size_t *rank;   // (n_stages, n_tracked) each one's rank there (1 = top; logits_rank)
    float *logprob; // (n_stages, n_tracked) and its log-probability
    // the last stage's top-1 (the model's answer): the first stage where it is top-1, and its
    // rank at the stage before (0 when that first stage is 0, the embedding)
    int final_id;
    size_t first_top_stage, rank_before;
} Gpt2Lens;

// Computes the lens of c (made with lens, lens_pos through the passes) into out: ln_f and
// the LM head over the L + 1 rows on m's backend, then each row's k best tokens and the ranks
// of tracked[0 .. n_tracked). KG_OK; KG_EINVAL (no lens kept, the position never ran, k or V
// out of range), KG_ENOMEM or the backend's error, with err filled (out then holds nothing).
// Free out with gpt2_lens_free(). c is unchanged; the backend memory of the (L + 1, V) logits
// lives only during the call.
int gpt2_capture_lens(const Gpt2 *m, const Gpt2Capture *c, size_t V, size_t k, const int *tracked,
                      size_t n_tracked, Gpt2Lens *out, char *err);
void gpt2_lens_free(Gpt2Lens *l);

// The attention at c's att_pos (c made with attention, positions 0..att_pos all through the
// passes) into att, host (L, NH, P): softmax over the P positions of q . k / sqrt(hs), per layer
// and head, summed in double. KG_OK; KG_EINVAL (not kept, or keys missing: "the attention view
// needs positions 0..att_pos in this pass"), KG_ENOMEM, with err filled.
int gpt2_capture_attention(const Gpt2 *m, const Gpt2Capture *c, float *att, char *err);

#endif
