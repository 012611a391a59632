// sampler_utf8.c — the byte-token mask of sampler_utf8.h.
#include "sampler_utf8.h"

#include <math.h>
#include <string.h>

// The character lead byte b starts: its continuation bytes (0 for ASCII) and the range of the
// first one (RFC 3629's well-formed sequences); -1 for a byte no character starts with.
static int utf8_lead(int b, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 0;
    if (b < 0xC2 || b > 0xF4) return -1; // a continuation byte, an overlong C0/C1, past U+10FFFF
    if (b == 0xE0) *lo = 0xA0;           // below: overlong
    if (b == 0xED) *hi = 0x9F;           // above: a surrogate
    if (b == 0xF0) *lo = 0x90;           // below: overlong
    if (b == 0xF4) *hi = 0x8F;           // above: past U+10FFFF
    return b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
}

// 1 when the vocabulary has a byte token in lo..hi.
static int utf8_has_byte(const SamplerUtf8 *u, int lo, int hi) {
    for (int b = lo; b <= hi; b++)
        if (u->id_of[b] >= 0) return 1;
    return 0;
}

void sampler_utf8_init(SamplerUtf8 *u, const int byte_id[256]) {
    memcpy(u->id_of, byte_id, sizeof u->id_of);
    u->any = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t lo, hi;
        int need = utf8_lead(b, &lo, &hi);
        // every continuation after the first may be any of 80..BF
        u->lead_ok[b] = u->id_of[b] >= 0 && need >= 0 &&
                        (need == 0 ||
                         (utf8_has_byte(u, lo, hi) && (need == 1 || utf8_has_byte(u, 0x80, 0xBF))));
        u->any |= u->id_of[b] >= 0;
    }
}

void sampler_utf8_accept(SamplerUtf8State *st, int byte) {
    if (byte < 0) { // a text token
        st->need = 0;
        return;
    }
    if (st->need && byte >= st->lo && byte <= st->hi) {
        st->need--;
        st->lo = 0x80;
        st->hi = 0xBF;
        return;
    }
    int need = utf8_lead(byte, &st->lo, &st->hi); // between characters, or one cut short
    st->need = need > 0 ? (uint8_t)need : 0;
}

void sampler_utf8_mask(const SamplerUtf8 *u, const SamplerUtf8State *st, float *out,
                       const float *logits, size_t V) {
    if (u->any && st->need && utf8_has_byte(u, st->lo, st->hi)) { // only the next byte's tokens
        float keep[256];
        for (int b = st->lo; b <= st->hi; b++)
            if (u->id_of[b] >= 0) keep[b] = logits[u->id_of[b]];
        for (size_t i = 0; i < V; i++)
            out[i] = -INFINITY;
        for (int b = st->lo; b <= st->hi; b++)
            if (u->id_of[b] >= 0) out[u->id_of[b]] = keep[b];
        return;
    }
    if (out != logits) memcpy(out, logits, V * sizeof *out);
    for (int b = 0x80; u->any && b < 256; b++) // between characters: bytes no character starts
        if (u->id_of[b] >= 0 && !u->lead_ok[b]) out[u->id_of[b]] = -INFINITY;
}
