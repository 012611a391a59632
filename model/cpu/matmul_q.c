// matmul_q.c — out (N, OC) = inp (N, C) @ W^T + bias, W (OC, C) in q8_0 or q4_0 blocks
// (dtype.h: 32 weights along C and one f16 scale per block, ggml's layouts, used as stored).
// N = rows, C = channels in (a multiple of 32), OC = channels out, nb = C / 32 blocks.
//
// The input rows are quantized first, per block of 32, to int8 with a float scale
// (dx = max|x| / 127, q = round(x / dx), ties to even): each output is then a sum over blocks
// of dw * dx * (integer dot product of 32 int8 pairs). The integer dot products run on
// - AVX512-VNNI: vpdpbusd (u8 x s8, four products per int32 lane) over four blocks at a time,
//   one 128-bit lane per block: the weights enter as u8 (q8_0: w ^ 0x80 = w + 128; q4_0: the
//   nibble, w + 8), the input's int8 are laid out to match (qmm_quant_row), and the int32
//   accumulator starts at -128 (or -8) * sum(q) of each block, which takes the offset out.
//   Per four blocks and (W row, input row): two vpdpbusd, one conversion, one scale product
//   and one FMA;
// - AVX2 (and AVX-512 without VNNI): vpmaddubsw on |w| and sign(x, w), then vpmaddwd into
//   int32, one block per ymm;
// - portable C: int32 sums.
//
// Decode (N <= QMM_RN rows) reads each W row once, from first block to last, one row after
// another: a single sequential stream per thread, which the hardware prefetcher follows at
// full speed. A register tile over W rows made it four short streams 0.8 KB apart: measured
// (q8_0, 51200 x 768, one thread, Zen 4) 7 GB/s against 26 GB/s for the one stream, and the
// KoGPT2-base matrices of one decode step at 2 threads 37.7 GB/s (q8_0 3.5 ms, q4_0 1.9 ms:
// about 3x and 4x faster than the four-row tile).
// Prompts use a register tile of QMM_RO W rows by QMM_RN input rows over QMM_XBLOCK input
// rows at a time (their quantized groups stay in L2 while a task's W rows pass over them); on
// VNNI each W tile is unpacked once per QMM_XBLOCK rows into the thread's scratch (qmm_pack)
// instead of once per QMM_RN rows. q8_0 at 512 rows, one thread: 1.8x the f32 tiled kernel,
// 1.6x the previous tile (4 x 4 over two-block pairs, each scale product per pair).
// Each output is summed over its blocks in the same order whatever the tile, the task or the
// thread count, so results are thread-count independent (and the same for a row whether it
// is decoded alone or in a prompt).
// Part of ops.c (compiled once per instruction set).

// Decode: the W rows split into this many contiguous stretches per thread (each one stream),
// claimed in turn, so that a thread the OS delays is covered by the others.
#define QMM_TASKS_PER_THREAD 4
#define QMM_ROWS_PER_TASK    64 // prompts: W rows per task
#define QMM_XBLOCK           64 // prompts: input rows per pass over a task's W rows

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define QMM_VNNI 1
// 16 accumulators; the W tile's halves come from the packed tile, the input's from memory.
// 3 x 4 and 5 x 4 measured within 2 % at 512 rows, 2 x 4 and 4 x 3 slower (6-20 %).
#define QMM_RO 4
#define QMM_RN 4
#elif defined(__AVX2__)
#define QMM_AVX2 1
#define QMM_RO   2
#define QMM_RN   4
#else
#define QMM_RO 2
#define QMM_RN 4
#endif

typedef struct {
    float *out;
    const float *inp;
    KgMat w;
    const float *bias;
    size_t N, C, OC;
    size_t rows_per_task;
    uint8_t *xq;           // (N, ldx) the input rows quantized, this ISA's layout (qmm_x_row_bytes)
    size_t ldx;            // bytes per row of xq, a multiple of 64
    float *const *scratch; // per thread (prompts: a prepared W tile)
} QMatmulJob;

// A block's f16 scale as a float (one vcvtph2ps where F16C is there).
static inline float qmm_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return kg_f16_to_f32(h);
#endif
}

#if defined(QMM_VNNI)
// One quantized input row, VNNI layout: groups of four blocks (128 inputs), 256 bytes each:
//   lo   (4, 16) int8: inputs 0..15 of block k in bytes 16k.. (a 128-bit lane per block)
//   hi   (4, 16) int8: inputs 16..31
//   seed (16) int32: off * sum(q) of block k in lane 4k, 0 in the others (off: -128 for q8_0,
//        -8 for q4_0, the weights' offset as u8); vpdpbusd starts from it
//   dx   (16) f32: block k's scale in lanes 4k..4k+3
// A last group with fewer than four blocks is padded with zeros, which add nothing.
#define QMM_GROUP_BYTES 256

static inline size_t qmm_x_row_bytes(size_t C) { return (C / KG_QBLOCK + 3) / 4 * QMM_GROUP_BYTES; }

static void qmm_quant_row(const QMatmulJob *j, size_t n) {
    const size_t nb = j->C / KG_QBLOCK;
    const float *x = j->inp + n * j->C;
    uint8_t *row = j->xq + n * j->ldx;
    const int32_t off = j->w.dtype == KG_Q8_0 ? -128 : -8;
    if (nb % 4) memset(row + nb / 4 * QMM_GROUP_BYTES, 0, QMM_GROUP_BYTES);
    for (size_t b = 0; b < nb; b++) {
        __m512 v0 = _mm512_loadu_ps(x + b * KG_QBLOCK),
               v1 = _mm512_loadu_ps(x + b * KG_QBLOCK + 16);
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        // the default rounding mode: to nearest, ties to even (|x * id| <= 127)
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        const int32_t seed[4] = {off * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)), 0, 0, 0};
        uint8_t *g = row + b / 4 * QMM_GROUP_BYTES + b % 4 * 16;
        _mm_storeu_si128((__m128i *)g, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(g + 64), _mm512_cvtepi32_epi8(q1));
        memcpy(g + 128, seed, 16);
        _mm_storeu_ps((float *)(g + 192), _mm_set1_ps(d));
    }
}

// Four blocks of one W row (blk: the first one's scale) as u8: *lo the inputs 0..15 of each
// block (a 128-bit lane per block), *hi the inputs 16..31; returns their scales, block k's
// in lanes 4k..4k+3. The four f16 scales are gathered in a general register (four scalar
// loads, off the vector ports) and widened together.
static inline __attribute__((always_inline)) __m512 qmm_load_group(const uint8_t *blk, KgDtype dt,
                                                                   __m512i *lo, __m512i *hi) {
    const size_t bs = kg_dtype_bytes(dt, KG_QBLOCK);
    uint64_t h = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t d;
        memcpy(&d, blk + k * bs, 2);
        h |= (uint64_t)d << 16 * k;
    }
    const __m512i lane4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 dw = _mm512_permutexvar_ps(
        lane4, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)h))));
    if (dt == KG_Q8_0) { // two blocks per load pair, then their halves sorted into lanes
        __m512i b01 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 2))),
            _mm256_loadu_si256((const __m256i *)(blk + bs + 2)), 1);
        __m512i b23 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 2 * bs + 2))),
            _mm256_loadu_si256((const __m256i *)(blk + 3 * bs + 2)), 1);
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        *lo = _mm512_xor_si512(_mm512_shuffle_i64x2(b01, b23, 0x88), flip); // lanes 0, 2 | 0, 2
        *hi = _mm512_xor_si512(_mm512_shuffle_i64x2(b01, b23, 0xdd), flip); // lanes 1, 3 | 1, 3
    } else { // q4_0: 16 bytes per block, inputs 0..15 in the low nibbles, 16..31 in the high
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + 2)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(blk + bs + 2)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(blk + 2 * bs + 2)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(blk + 3 * bs + 2)), 3);
        const __m512i m4 = _mm512_set1_epi8(15);
        *lo = _mm512_and_si512(v, m4);
        *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    return dw;
}

// Group gi of W row wrow as qmm_load_group gives it; a last group of one to three blocks is
// copied beside zeros first (a scale of 0 adds 0, and nothing past the row is read).
static inline __attribute__((always_inline)) __m512
qmm_row_group(const uint8_t *wrow, size_t gi, size_t nb, KgDtype dt, __m512i *lo, __m512i *hi) {
    const size_t bs = kg_dtype_bytes(dt, KG_QBLOCK);
    if (gi * 4 + 4 <= nb) return qmm_load_group(wrow + gi * 4 * bs, dt, lo, hi);
    uint8_t tail[4 * KG_Q8_0_BYTES] = {0};
    memcpy(tail, wrow + gi * 4 * bs, (nb - gi * 4) * bs);
    return qmm_load_group(tail, dt, lo, hi);
}

// A prompt's W tile, prepared once for all its input rows: group gi of tile row r at
// pk + (gi * ro + r) * QMM_WGROUP_BYTES, as lo, hi (u8) and the scales.
#define QMM_WGROUP_BYTES 192

static inline size_t qmm_pack_bytes(size_t C) {
    return (C / KG_QBLOCK + 3) / 4 * QMM_RO * QMM_WGROUP_BYTES;
}

// pk <- W rows o0..o0+ro prepared: the unpacking and the scales' gathering, otherwise done
// again for every QMM_RN input rows, are done once per tile. The tile's rows are ro streams
// (the hardware prefetcher falls behind, as in decode with several rows), so each group of
// the next tile's rows (from `next`, NULL for none) is asked for into L2 here, to arrive
// while this tile's products run: 20-token prompts 1.2x (q4_0) and 1.1x (q8_0) faster
// (KoGPT2-base, 2 threads, Zen 4).
static inline __attribute__((always_inline)) void
qmm_pack(const QMatmulJob *j, uint8_t *pk, size_t o0, int ro, const uint8_t *next, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, ng = (nb + 3) / 4, rb = kg_dtype_bytes(dt, j->C);
    const size_t bs = kg_dtype_bytes(dt, KG_QBLOCK);
    for (size_t gi = 0; gi < ng; gi++)
        for (int r = 0; r < ro; r++) {
            const uint8_t *wrow = (const uint8_t *)j->w.data + (o0 + (size_t)r) * rb;
            uint8_t *p = pk + (gi * (size_t)ro + (size_t)r) * QMM_WGROUP_BYTES;
            if (next) prefetch_l2(next + (size_t)r * rb + gi * 4 * bs, 4 * bs);
            __m512i lo, hi;
            _mm512_storeu_ps(p + 128, qmm_row_group(wrow, gi, nb, dt, &lo, &hi));
            _mm512_storeu_si512(p, lo);
            _mm512_storeu_si512(p + 64, hi);
        }
}

// out[n0:n0+rn, o0:o0+ro] from W rows o0.. (read from W itself, or prepared in pk when pk is
// not NULL) and input rows n0.. (ro, rn and whether pk is NULL: constants once inlined).
// Per group, (W row, input row): two vpdpbusd from the seed, one conversion, the product of
// the two scales and one FMA.
static inline __attribute__((always_inline)) void
qmm_tile(const QMatmulJob *j, const uint8_t *pk, size_t o0, size_t n0, int ro, int rn, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, ng = (nb + 3) / 4, rb = kg_dtype_bytes(dt, j->C);
    const uint8_t *w = (const uint8_t *)j->w.data + o0 * rb, *x = j->xq + n0 * j->ldx;
    __m512 acc[QMM_RO][QMM_RN];
    for (int r = 0; r < ro; r++)
        for (int n = 0; n < rn; n++)
            acc[r][n] = _mm512_setzero_ps();
    for (size_t gi = 0; gi < ng; gi++) {
        __m512i lo[QMM_RO], hi[QMM_RO];
        __m512 dw[QMM_RO];
        for (int r = 0; r < ro; r++) {
            if (pk) {
                const uint8_t *p = pk + (gi * (size_t)ro + (size_t)r) * QMM_WGROUP_BYTES;
                lo[r] = _mm512_loadu_si512(p);
                hi[r] = _mm512_loadu_si512(p + 64);
                dw[r] = _mm512_loadu_ps(p + 128);
            } else {
                dw[r] = qmm_row_group(w + (size_t)r * rb, gi, nb, dt, &lo[r], &hi[r]);
            }
        }
        for (int n = 0; n < rn; n++) {
            const uint8_t *g = x + n * j->ldx + gi * QMM_GROUP_BYTES;
            __m512i xlo = _mm512_loadu_si512(g), xhi = _mm512_loadu_si512(g + 64);
            __m512i seed = _mm512_loadu_si512(g + 128);
            __m512 dx = _mm512_loadu_ps(g + 192);
            for (int r = 0; r < ro; r++) {
                __m512i dot =
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(seed, lo[r], xlo), hi[r], xhi);
                acc[r][n] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], dx), acc[r][n]);
            }
        }
    }
    for (int n = 0; n < rn; n++)
        for (int r = 0; r < ro; r++) {
            size_t o = o0 + (size_t)r;
            j->out[(n0 + n) * j->OC + o] =
                _mm512_reduce_add_ps(acc[r][n]) + (j->bias ? j->bias[o] : 0.0f);
        }
}
#else
// One quantized input row, AVX2 and portable layout: C int8, then (from the next 64 bytes on)
// the nb block scales as floats.
static inline size_t qmm_x_row_bytes(size_t C) {
    return (C + 63) / 64 * 64 + (C / KG_QBLOCK * sizeof(float) + 63) / 64 * 64;
}

static void qmm_quant_row(const QMatmulJob *j, size_t n) {
    const size_t C = j->C, nb = C / KG_QBLOCK;
    const float *x = j->inp + n * C;
    int8_t *q = (int8_t *)j->xq + n * j->ldx;
    float *xd = (float *)(j->xq + n * j->ldx + (C + 63) / 64 * 64);
    for (size_t b = 0; b < nb; b++) {
        const float *xb = x + b * KG_QBLOCK;
        float amax = 0.0f;
        for (int i = 0; i < KG_QBLOCK; i++) {
            float a = fabsf(xb[i]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        for (int i = 0; i < KG_QBLOCK; i++) // adding 1.5 * 2^23 rounds to nearest, ties to even
            q[b * KG_QBLOCK + i] = (int8_t)(int)((xb[i] * id + 12582912.0f) - 12582912.0f);
        xd[b] = d;
    }
}

// W is read as stored (no prepared tiles).
static inline size_t qmm_pack_bytes(size_t C) {
    (void)C;
    return 0;
}
static inline void qmm_pack(const QMatmulJob *j, uint8_t *pk, size_t o0, int ro,
                            const uint8_t *next, KgDtype dt) {
    (void)j, (void)pk, (void)o0, (void)ro, (void)next, (void)dt;
}

// Row n's int8 inputs and block scales.
static inline const int8_t *qmm_xq(const QMatmulJob *j, size_t n) {
    return (const int8_t *)j->xq + n * j->ldx;
}
static inline const float *qmm_xd(const QMatmulJob *j, size_t n) {
    return (const float *)(j->xq + n * j->ldx + (j->C + 63) / 64 * 64);
}
#endif

#if defined(QMM_AVX2)
static inline float qmm_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// One block of one W row as 32 signed int8 weights.
static inline __attribute__((always_inline)) __m256i qmm_load_w(const uint8_t *blk, KgDtype dt) {
    if (dt == KG_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
}

static inline __attribute__((always_inline)) void
qmm_tile(const QMatmulJob *j, const uint8_t *pk, size_t o0, size_t n0, int ro, int rn, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    const size_t rb = kg_dtype_bytes(dt, j->C); // one W row
    const uint8_t *w = (const uint8_t *)j->w.data + o0 * rb;
    (void)pk; // W is read as stored
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[QMM_RO][QMM_RN];
    for (int r = 0; r < ro; r++)
        for (int n = 0; n < rn; n++)
            acc[r][n] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i wv[QMM_RO], aw[QMM_RO];
        float dw[QMM_RO];
        for (int r = 0; r < ro; r++) {
            wv[r] = qmm_load_w(w + r * rb + b * bs, dt);
            aw[r] = _mm256_sign_epi8(wv[r], wv[r]); // |w|, u8
            dw[r] = qmm_f16(w + r * rb + b * bs);
        }
        for (int n = 0; n < rn; n++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(qmm_xq(j, n0 + n) + b * KG_QBLOCK));
            const float dx = qmm_xd(j, n0 + n)[b];
            for (int r = 0; r < ro; r++) {
                __m256i p16 = _mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, wv[r]));
                __m256i dot = _mm256_madd_epi16(p16, ones);
                acc[r][n] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw[r] * dx), acc[r][n]);
            }
        }
    }
    for (int n = 0; n < rn; n++)
        for (int r = 0; r < ro; r++) {
            size_t o = o0 + (size_t)r;
            j->out[(n0 + n) * j->OC + o] = qmm_hsum256(acc[r][n]) + (j->bias ? j->bias[o] : 0.0f);
        }
}
#elif !defined(QMM_VNNI)
// The weight at index i of one block, as its signed integer.
static inline int qmm_w(const uint8_t *blk, int i, KgDtype dt) {
    if (dt == KG_Q8_0) return (int8_t)blk[2 + i];
    return (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
}

static inline __attribute__((always_inline)) void
qmm_tile(const QMatmulJob *j, const uint8_t *pk, size_t o0, size_t n0, int ro, int rn, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    const size_t rb = kg_dtype_bytes(dt, j->C); // one W row
    (void)pk;                                   // W is read as stored
    for (int r = 0; r < ro; r++)
        for (int n = 0; n < rn; n++) {
            const size_t o = o0 + (size_t)r, row = n0 + (size_t)n;
            const int8_t *xq = qmm_xq(j, row);
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                const uint8_t *blk = (const uint8_t *)j->w.data + o * rb + b * bs;
                int32_t dot = 0;
                for (int i = 0; i < KG_QBLOCK; i++)
                    dot += qmm_w(blk, i, dt) * xq[b * KG_QBLOCK + i];
                acc += (float)dot * (qmm_f16(blk) * qmm_xd(j, row)[b]);
            }
            j->out[row * j->OC + o] = acc + (j->bias ? j->bias[o] : 0.0f);
        }
}
#endif

// Every tile of input rows [x0, x1) against W rows o0..o0+ro (ro and whether pk is NULL:
// constants once inlined; each tile's row count a constant too).
static inline __attribute__((always_inline)) void qmm_col(const QMatmulJob *j, const uint8_t *pk,
                                                          size_t o0, int ro, size_t x0, size_t x1,
                                                          KgDtype dt) {
    for (size_t n0 = x0; n0 < x1; n0 += QMM_RN) {
        switch (x1 - n0 < QMM_RN ? x1 - n0 : QMM_RN) {
        case 1:
            qmm_tile(j, pk, o0, n0, ro, 1, dt);
            break;
        case 2:
            qmm_tile(j, pk, o0, n0, ro, 2, dt);
            break;
        case 3:
            qmm_tile(j, pk, o0, n0, ro, 3, dt);
            break;
        default:
            qmm_tile(j, pk, o0, n0, ro, QMM_RN, dt);
            break;
        }
    }
}

// W rows [o0, o1) against every input row. Decode (N <= QMM_RN): one W row at a time, read
// straight from W as one stream. Prompts: tiles of QMM_RO rows (prepared into pk first where
// this ISA does that), over QMM_XBLOCK input rows at a time; the last rows alone.
static inline __attribute__((always_inline)) void qmm_task_dt(const QMatmulJob *j, uint8_t *pk,
                                                              size_t o0, size_t o1, KgDtype dt) {
    if (j->N <= QMM_RN) {
        for (size_t o = o0; o < o1; o++)
            qmm_col(j, NULL, o, 1, 0, j->N, dt);
        return;
    }
    for (size_t x0 = 0; x0 < j->N; x0 += QMM_XBLOCK) {
        const size_t x1 = x0 + QMM_XBLOCK < j->N ? x0 + QMM_XBLOCK : j->N;
        size_t o = o0;
        for (; o + QMM_RO <= o1; o += QMM_RO) {
            if (pk) {
                const uint8_t *next =
                    o + 2 * QMM_RO <= o1
                        ? (const uint8_t *)j->w.data + (o + QMM_RO) * kg_dtype_bytes(dt, j->C)
                        : NULL;
                qmm_pack(j, pk, o, QMM_RO, next, dt);
                qmm_col(j, pk, o, QMM_RO, x0, x1, dt);
            } else {
                qmm_col(j, NULL, o, QMM_RO, x0, x1, dt);
            }
        }
        for (; o < o1; o++)
            qmm_col(j, NULL, o, 1, x0, x1, dt);
    }
}

static void qmm_task(void *ctx, size_t t, int thread) {
    const QMatmulJob *j = ctx;
    size_t o0 = t * j->rows_per_task,
           o1 = o0 + j->rows_per_task < j->OC ? o0 + j->rows_per_task : j->OC;
    // the thread's scratch, from a cache line on, holds a prepared tile when it fits
    uint8_t *pk = (uint8_t *)(((uintptr_t)j->scratch[thread] + 63) & ~(uintptr_t)63);
    if (!qmm_pack_bytes(j->C) || qmm_pack_bytes(j->C) + 64 > CPU_SCRATCH_FLOATS * sizeof(float))
        pk = NULL;
    if (j->w.dtype == KG_Q8_0)
        qmm_task_dt(j, pk, o0, o1, KG_Q8_0);
    else
        qmm_task_dt(j, pk, o0, o1, KG_Q4_0);
}

static void qmm_quant_task(void *ctx, size_t n, int thread) {
    (void)thread;
    qmm_quant_row(ctx, n);
}

// The quantized path of cpu_matmul_forward: W (OC, C) in blocks. The input's quantized rows
// live in the backend's partial-sum buffer (under its mutex), grown on demand; when it cannot
// grow, the rows go through in chunks that fit it (NaN outputs if not even one row fits: the
// process is then out of memory for a few kilobytes).
static void cpu_matmul_q_forward(KgBackend *be, float *out, const float *inp, KgMat w,
                                 const float *bias, size_t N, size_t C, size_t OC) {
    CpuBackend *cb = cpu_of(be);
    const size_t ldx = qmm_x_row_bytes(C), row_floats = ldx / sizeof(float);
    const size_t threads = (size_t)cpu_pool_threads(cb->pool);
    const size_t align = 64 / sizeof(float); // room to start the rows on a cache line
    pthread_mutex_lock(&cb->partial_mutex);
    if (N * row_floats + align > cb->partial_cap) {
        float *grown = realloc(cb->partial, (N * row_floats + align) * sizeof *grown);
        if (grown) {
            cb->partial = grown;
            cb->partial_cap = N * row_floats + align;
        }
    }
    uint8_t *xq = (uint8_t *)(((uintptr_t)cb->partial + 63) & ~(uintptr_t)63);
    size_t fit = cb->partial_cap > align ? (cb->partial_cap - align) / row_floats : 0;
    size_t chunk = fit < N ? fit : N;
    if (!chunk)
        for (size_t i = 0; i < N * OC; i++)
            out[i] = NAN;
    for (size_t n0 = 0; chunk && n0 < N; n0 += chunk) {
        const size_t rows = N - n0 < chunk ? N - n0 : chunk;
        QMatmulJob j = {out + n0 * OC, inp + n0 * C, w, bias, rows, C, OC, 0, xq, ldx, cb->scratch};
        if (rows == 1) // one row: a few hundred nanoseconds, less than waking the pool
            qmm_quant_row(&j, 0);
        else
            cpu_pool_run(cb->pool, qmm_quant_task, &j, rows);
        if (rows <= QMM_RN) // decode: a few contiguous stretches of W per thread
            j.rows_per_task =
                (OC + threads * QMM_TASKS_PER_THREAD - 1) / (threads * QMM_TASKS_PER_THREAD);
        else
            j.rows_per_task = QMM_ROWS_PER_TASK;
        cpu_pool_run(cb->pool, qmm_task, &j, (OC + j.rows_per_task - 1) / j.rows_per_task);
    }
    pthread_mutex_unlock(&cb->partial_mutex);
}
