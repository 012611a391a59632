// sampler_utf8.h — keeps a generation's bytes on the way to valid UTF-8. A vocabulary with
// byte tokens (SentencePiece's <0xAB> pieces of byte_fallback models) lets a model draw bytes
// that never become a character: a continuation byte with no lead, a lead cut short by a
// text token, C0, C1, F5..FF, an overlong or a surrogate; a decoder shows U+FFFD for each.
// The mask sets the logits of exactly those draws to -inf, from the state the text is in:
//   between characters: every token stays but the byte tokens that cannot start a character
//     (80..BF, C0, C1, F5..FF, and a lead whose continuation bytes the vocabulary lacks);
//   inside a character: only the byte tokens of the range its next byte must be in
//     (RFC 3629: after E0 A0..BF, after ED 80..9F, after F0 90..BF, after F4 80..8F, else
//     80..BF); text tokens, end-of-text included, wait until the character is complete.
// Cost per step: O(256) between characters, one fill of V floats inside one; nothing reads a
// token's text: the caller gives each token's byte (-1 for a text token) from a table.
//
// Use, per job (the vocabulary part is shared and read-only):
//   once:   sampler_utf8_init(&u, byte_id);          // byte_id[b]: the id of byte b's token
//   admit:  SamplerUtf8State st = {0};                // then each prompt id, so that a prompt
//           sampler_utf8_accept(&st, byte_of(id));    // ending inside a character goes on
//   step:   sampler_utf8_mask(&u, &st, row, row);     // after the penalties, before sampling
//           id = sampler_sample(sampler, row);
//           sampler_utf8_accept(&st, byte_of(id));
#ifndef SAMPLER_UTF8_H
#define SAMPLER_UTF8_H

#include <stddef.h>
#include <stdint.h>

// What a vocabulary's byte tokens allow; filled by sampler_utf8_init, then read-only.
typedef struct {
    int id_of[256];       // byte -> the id of its byte token, -1 when the vocabulary has none
    uint8_t lead_ok[256]; // 1: a character may start with this byte token (one byte, or a lead
                          // whose every continuation range has a byte token)
    int any;              // the vocabulary has byte tokens (else the mask changes nothing)
} SamplerUtf8;

// Where one sequence's bytes are: between characters (need 0) or inside one.
typedef struct {
    uint8_t need;   // continuation bytes still to come
    uint8_t lo, hi; // the range the next one must be in (need > 0)
} SamplerUtf8State;

// Fills u from byte_id (256 entries: a byte's token id, or -1). byte_id is not kept.
void sampler_utf8_init(SamplerUtf8 *u, const int byte_id[256]);

// The state after one more token: byte 0..255 for a byte token, -1 for any other token (it
// ends a character cut short, as the decoder does). A byte that cannot go on the character
// under way starts afresh, as the decoder reads it (the cut-short bytes become U+FFFD).
void sampler_utf8_accept(SamplerUtf8State *st, int byte);

// out (V) = logits (V) with the tokens that would break st's character at -inf (the legend
// above). out may be logits itself (in place), or a buffer that does not overlap it. Inside a
// character whose continuation the vocabulary cannot give (a prompt ending in such a lead),
// masks as between characters instead, so a row never loses every token.
void sampler_utf8_mask(const SamplerUtf8 *u, const SamplerUtf8State *st, float *out,
                       const float *logits, size_t V);

#endif
