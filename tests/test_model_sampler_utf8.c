// test_model_sampler_utf8.c — the UTF-8 byte mask (model/sampler_utf8.h) against an oracle
// that decodes: from every state a sequence of byte tokens can reach (between characters and
// every valid incomplete prefix of 1..3 bytes, walked from all 256 first bytes), each of the
// 256 byte tokens is allowed exactly when some well-formed character starts with the bytes so
// far plus it, and text tokens only between characters. Then: what a decoder does with a
// byte that breaks a character, vocabularies missing byte tokens, and draws from masked rows.
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/sampler.h"
#include "model/sampler_utf8.h"

enum { V = 300, BYTE0 = 40 }; // byte b is token BYTE0 + b; the other ids are text tokens

// The oracle: 1 when a well-formed UTF-8 character (a scalar value, shortest form) starts with
// q[0..n). Completing q with 0x80s and with 0xBFs gives the least and the greatest code point
// it can still become; the character is possible when that range meets the scalars of its
// length, other than the surrogates alone.
static int oracle_prefix_ok(const uint8_t *q, int n) {
    int len = q[0] < 0x80             ? 1
              : (q[0] & 0xE0) == 0xC0 ? 2
              : (q[0] & 0xF0) == 0xE0 ? 3
              : (q[0] & 0xF8) == 0xF0 ? 4
                                      : 0;
    if (!len || n > len) return 0;
    for (int i = 1; i < n; i++)
        if ((q[i] & 0xC0) != 0x80) return 0;
    static const long lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    static const long lo_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    static const long hi_of[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    long lo = q[0] & lead_mask[len], hi = lo;
    for (int i = 1; i < len; i++) {
        lo = lo << 6 | (i < n ? q[i] & 0x3F : 0x00);
        hi = hi << 6 | (i < n ? q[i] & 0x3F : 0x3F);
    }
    if (hi < lo_of[len] || lo > hi_of[len]) return 0;
    return !(lo >= 0xD800 && hi <= 0xDFFF);
}

// The character q[0..n) is complete.
static int oracle_complete(const uint8_t *q, int n) {
    int len = q[0] < 0x80 ? 1 : (q[0] & 0xE0) == 0xC0 ? 2 : (q[0] & 0xF0) == 0xE0 ? 3 : 4;
    return n == len;
}

static void full_vocab(int byte_id[256]) {
    for (int b = 0; b < 256; b++)
        byte_id[b] = BYTE0 + b;
}

static size_t n_states;

// Checks the mask after the bytes q[0..n) (a valid incomplete character, or none), then walks
// into every byte that keeps the character possible and incomplete.
static void walk(const SamplerUtf8 *u, uint8_t *q, int n) {
    SamplerUtf8State st = {0};
    for (int i = 0; i < n; i++)
        sampler_utf8_accept(&st, q[i]);
    CHECK((st.need == 0) == (n == 0)); // inside a character exactly when bytes were given
    float row[V], out[V];
    for (size_t i = 0; i < V; i++)
        row[i] = (float)(i % 7) - 3.0f;
    memcpy(out, row, sizeof out);
    sampler_utf8_mask(u, &st, out, out, V); // in place
    n_states++;
    for (size_t i = 0; i < V; i++) {
        int allowed = isfinite(out[i]);
        int want;
        if (i >= BYTE0 && i < BYTE0 + 256) {
            q[n] = (uint8_t)(i - BYTE0);
            want = oracle_prefix_ok(q, n + 1);
        } else {
            want = n == 0; // text tokens only between characters
        }
        CHECK_MSG(allowed == want,
                  "after %d bytes (%02X %02X %02X): token %zu allowed %d, oracle %d", n,
                  n > 0 ? q[0] : 0, n > 1 ? q[1] : 0, n > 2 ? q[2] : 0, i, allowed, want);
        if (allowed) CHECK(out[i] == row[i]); // kept tokens keep their logit
    }
    for (int b = 0; b < 256; b++) {
        q[n] = (uint8_t)b;
        if (oracle_prefix_ok(q, n + 1) && !oracle_complete(q, n + 1)) walk(u, q, n + 1);
    }
    if (n) { // the last byte completes the character: back between characters
        for (int b = 0x80; b <= 0xBF; b++) {
            q[n] = (uint8_t)b;
            if (!oracle_prefix_ok(q, n + 1) || !oracle_complete(q, n + 1)) continue;
            SamplerUtf8State done = st;
            sampler_utf8_accept(&done, b);
            CHECK(done.need == 0);
        }
    }
}

static void test_all_states(void) {
    int byte_id[256];
    full_vocab(byte_id);
    SamplerUtf8 u;
    sampler_utf8_init(&u, byte_id);
    CHECK(u.any);
    uint8_t q[4];
    n_states = 0;
    walk(&u, q, 0);
    // between characters, 51 leads (C2..F4), the second bytes of 3- and 4-byte characters
    // (E0 and ED 32 each, E1..EC and EE..EF 64 each; F0 48, F1..F3 64 each, F4 16) and the
    // third bytes of the 4-byte ones (64 each)
    size_t second3 = 32 + 32 + 14 * 64, second4 = 48 + 3 * 64 + 16;
    CHECK_MSG(n_states == 1 + 51 + second3 + second4 + second4 * 64, "walked %zu states", n_states);
}

// The decoder's reading of a byte that breaks a character: the cut-short bytes are lost and
// the byte itself is read as the start of a new one; a text token ends the character.
static void test_accept_breaks(void) {
    SamplerUtf8State st = {0};
    sampler_utf8_accept(&st, 0xEC); // 진 = EC A7 84
    CHECK(st.need == 2 && st.lo == 0x80 && st.hi == 0xBF);
    sampler_utf8_accept(&st, 0xA7);
    CHECK(st.need == 1);
    sampler_utf8_accept(&st, 0x84);
    CHECK(st.need == 0);
    sampler_utf8_accept(&st, 0xE0);
    CHECK(st.need == 2 && st.lo == 0xA0 && st.hi == 0xBF);
    sampler_utf8_accept(&st, 0x41); // ASCII inside: a fresh character
    CHECK(st.need == 0);
    sampler_utf8_accept(&st, 0xF4);
    CHECK(st.need == 3 && st.lo == 0x80 && st.hi == 0x8F);
    sampler_utf8_accept(&st, 0xC3); // a new lead
    CHECK(st.need == 1 && st.lo == 0x80 && st.hi == 0xBF);
    sampler_utf8_accept(&st, -1); // a text token
    CHECK(st.need == 0);
    sampler_utf8_accept(&st, 0xBF); // a lone continuation byte stays between characters
    CHECK(st.need == 0);
    sampler_utf8_accept(&st, 0xF5);
    CHECK(st.need == 0);
}

// A vocabulary without some byte tokens: a lead whose continuation range has none is masked
// between characters; a state that arrived there anyway (a prompt) masks as between
// characters, so the row keeps tokens; without byte tokens the mask is a copy.
static void test_partial_vocab(void) {
    int byte_id[256];
    full_vocab(byte_id);
    for (int b = 0x80; b <= 0x8F; b++)
        byte_id[b] = -1;
    SamplerUtf8 u;
    sampler_utf8_init(&u, byte_id);
    CHECK(!u.lead_ok[0xF4] && u.lead_ok[0xE0] && u.lead_ok[0xED] && u.lead_ok[0xF0]);
    float row[V], out[V];
    for (size_t i = 0; i < V; i++)
        row[i] = 1.0f;
    SamplerUtf8State st = {0};
    sampler_utf8_mask(&u, &st, out, row, V);
    CHECK(isinf(out[BYTE0 + 0xF4]) && isfinite(out[BYTE0 + 0xF3]) && isfinite(out[0]));
    sampler_utf8_accept(&st, 0xF4); // from a prompt
    sampler_utf8_mask(&u, &st, out, row, V);
    CHECK(isfinite(out[0]) && isinf(out[BYTE0 + 0xF4]));
    for (int b = 0; b < 256; b++)
        byte_id[b] = -1;
    sampler_utf8_init(&u, byte_id);
    CHECK(!u.any);
    sampler_utf8_accept(&st, 0xEC);
    sampler_utf8_mask(&u, &st, out, row, V);
    CHECK(!memcmp(out, row, sizeof out));
}

// Sampling from masked rows at temperature 1.5, top-p and greedy: a masked token is never
// drawn, and the sequence of bytes drawn stays valid UTF-8 (the oracle, byte by byte).
static void test_sampling_masked(void) {
    int byte_id[256];
    full_vocab(byte_id);
    SamplerUtf8 u;
    sampler_utf8_init(&u, byte_id);
    const float temps[] = {1.5f, 1.0f, 0.0f};
    const float top_ps[] = {1.0f, 0.9f, 1.0f};
    for (size_t t = 0; t < 3; t++) {
        Sampler *s = sampler_new(V, temps[t], 0, top_ps[t], 7 + t);
        CHECK(s != NULL);
        if (!s) return;
        SamplerUtf8State st = {0};
        uint8_t q[4];
        int n = 0;
        uint64_t r = 99 + t;
        for (int step = 0; step < 4000; step++) {
            float row[V];
            for (size_t i = 0; i < V; i++) { // byte tokens favoured: most draws are bytes
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                row[i] = (float)((r >> 40) % 1000) / 200.0f + (i >= BYTE0 && i < BYTE0 + 256);
            }
            sampler_utf8_mask(&u, &st, row, row, V);
            int id = sampler_sample(s, row);
            CHECK(id >= 0 && isfinite(row[id]));
            int b = id >= BYTE0 && id < BYTE0 + 256 ? id - BYTE0 : -1;
            if (b < 0) {
                CHECK(n == 0);
            } else {
                q[n++] = (uint8_t)b;
                CHECK_MSG(oracle_prefix_ok(q, n), "drew %02X after %d bytes", b, n - 1);
                if (oracle_complete(q, n)) n = 0;
            }
            sampler_utf8_accept(&st, b);
        }
        sampler_free(s);
    }
}

int main(void) {
    test_all_states();
    test_accept_breaks();
    test_partial_vocab();
    test_sampling_masked();
    return check_report();
}
