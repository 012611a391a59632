// simd.h — the vector type the CPU kernels are written in, at the native width of the
// instruction set this translation unit is compiled for (ops.c is compiled once per ISA:
// -mavx512f... (also with VNNI, and with VNNI and BF16), -mavx2 -mfma -mf16c, and plain
// x86-64 / any other architecture).
// Kernels use GCC vector extensions on `vf`, so one source serves every width.
#ifndef CPU_SIMD_H
#define CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#include "../dtype.h"
#include "../kgmath.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define VLEN 16
#elif defined(__AVX2__)
#include <immintrin.h>
#define VLEN 8
#else
#define VLEN 4
#endif

typedef float vf __attribute__((vector_size(VLEN * sizeof(float))));
typedef uint16_t vh __attribute__((vector_size(VLEN * sizeof(uint16_t))));
typedef uint32_t vu __attribute__((vector_size(VLEN * sizeof(uint32_t))));

// Loads and stores of VLEN floats from any address (memcpy compiles to one unaligned move).
static inline vf vf_load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vf_store(float *p, vf v) { memcpy(p, &v, sizeof v); }

static inline vf vf_set1(float x) { return (vf){0} + x; }

// VLEN half-precision values widened to float.
static inline vf vf_load_f16(const uint16_t *p) {
#if defined(__AVX512F__)
    return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#elif defined(__AVX2__) && defined(__F16C__)
    return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    vf v;
    for (int i = 0; i < VLEN; i++)
        v[i] = kg_f16_to_f32(p[i]);
    return v;
#endif
}

// VLEN bfloat16 values widened to float: each is the top half of a float.
static inline vf vf_load_bf16(const uint16_t *p) {
    vh h;
    memcpy(&h, p, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    return (vf)u;
}

// VLEN elements i.. of an f32/f16/bf16 array, as floats. Inlined with a constant dtype, the
// branches fold away.
static inline __attribute__((always_inline)) vf vf_load_as(const void *p, KgDtype dt, size_t i) {
    if (dt == KG_F32) return vf_load((const float *)p + i);
    if (dt == KG_F16) return vf_load_f16((const uint16_t *)p + i);
    return vf_load_bf16((const uint16_t *)p + i);
}

// Each lane rounded to bfloat16 (to nearest, ties to even), as the bits of the float it
// stands for (low half zero); a NaN stays a NaN. With AVX512-BF16 one vcvtneps2bf16 (which
// also flushes subnormals to zero): rounding each weight of an f16 matrix the integer way
// took a bf16-operand decode step 10 % longer than an f32 one; this way, the same time.
static inline vu vf_round_bf16(vf v) {
#if defined(__AVX512BF16__)
    return (vu)_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh((__m512)v)), 16);
#else
    vu u = (vu)v, nan = (vu)(v != v);
    vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (r & ~nan) | ((u | 0x00400000u) & 0xffff0000u & nan);
#endif
}

// The pairs vdpbf16ps multiplies: lane i holds a[i] rounded to bf16 in its low half and
// b[i] in its high half.
static inline vu vu_bf16_pairs(vf a, vf b) { return (vf_round_bf16(a) >> 16) | vf_round_bf16(b); }

// acc + x.hi * w.hi + x.lo * w.lo per lane, x one pair of bf16 values for every lane, w VLEN
// pairs: vdpbf16ps where the CPU has AVX512-BF16, else the same two products one after the
// other, the high one first as vdpbf16ps adds them (Intel's SDM). A product of two bf16
// values is exact in f32, so only the additions round, the same way in both; except that
// vdpbf16ps flushes subnormal inputs and results to zero (magnitudes below 2^-126, far
// under what a matmul of activations and weights holds). test_cpu_matmul compares the two.
static inline vf vf_dot_bf16(vf acc, uint32_t x, vu w) {
#if defined(__AVX512BF16__)
    return (vf)_mm512_dpbf16_ps((__m512)acc, (__m512bh)_mm512_set1_epi32((int)x), (__m512bh)w);
#else
    acc += vf_set1(kg_bits_to_f32(x & 0xffff0000u)) * (vf)(w & 0xffff0000u);
    return acc + vf_set1(kg_bits_to_f32(x << 16)) * (vf)(w << 16);
#endif
}

// Element i of an f32/f16/bf16 array, as a float.
static inline __attribute__((always_inline)) float load_as(const void *p, KgDtype dt, size_t i) {
    if (dt == KG_F32) return ((const float *)p)[i];
    if (dt == KG_F16) return kg_f16_to_f32(((const uint16_t *)p)[i]);
    return kg_bf16_to_f32(((const uint16_t *)p)[i]);
}

// Asks for the cache lines of [p, p + bytes) in L2 ahead of their use (prefetcht1 on x86),
// where the hardware prefetcher would not fetch them in time: weights read as several
// streams at once. Measured against prefetcht0 on the streaming matmuls (Zen 4): L1 is too
// small to hold lines asked for a pass ahead, and they were evicted before use. Every line
// the span touches: a memory-mapped file's tensors start anywhere, so a 128-byte span is
// often three lines (asking for two from p left the tiled kernel's strips waiting on the
// third: KoGPT2-base 20-token prompts from a safetensors mapping, 2 threads, took 1.43x (f16)
// and 1.36x (f32) as long).
static inline __attribute__((always_inline)) void prefetch_l2(const void *p, size_t bytes) {
    const uintptr_t end = (uintptr_t)p + bytes;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64)
        __builtin_prefetch((const void *)a, 0, 2);
}

// Horizontal sum by halving: log2(VLEN) shuffle+add steps instead of VLEN scalar adds.
static inline float vf_sum(vf v) {
#if VLEN == 16
    typedef float vf8 __attribute__((vector_size(32)));
    vf8 h8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#elif VLEN == 8
    typedef float vf8 __attribute__((vector_size(32)));
    vf8 h8 = v;
#endif
#if VLEN >= 8
    typedef float vf4 __attribute__((vector_size(16)));
    vf4 h4 =
        __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
#else
    vf h4 = v;
#endif
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// Lane-wise maximum; a NaN in b keeps a's lane (as `b > a ? b : a` does).
static inline vf vf_maxv(vf a, vf b) {
    vu take_b = (vu)(b > a);
    return (vf)(((vu)b & take_b) | ((vu)a & ~take_b));
}

static inline float vf_max(vf v) {
    float m = v[0];
    for (int i = 1; i < VLEN; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

#endif
