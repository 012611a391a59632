// matmul_q.c — out (N, OC) = inp (N, C) @ W^T + bias, W (OC, C) in q8_0 or q4_0 blocks
// (dtype.h: 32 weights along C and one f16 scale per block, ggml's layouts).
// N = rows, C = channels in (a multiple of 32), OC = channels out, nb = C / 32 blocks.
//
// The input rows are quantized first, per block of 32, to int8 with a float scale
// (dx = max|x| / 127, q = round(x / dx)): each output is then a sum over blocks of
// dw * dx * (integer dot product of 32 int8 pairs). The integer dot products run on
// - AVX512-VNNI: vpdpbusd (u8 x s8, four products per int32 lane), two blocks per zmm; the
//   weights enter as u8 (q8_0: w ^ 0x80 = w + 128; q4_0: the nibble, w + 8) and the
//   accumulator starts at -128 (or -8) * sum(q) of the block, which takes the offset out;
// - AVX2 (and AVX-512 without VNNI): vpmaddubsw on |w| and sign(x, w), then vpmaddwd into
//   int32, one block per ymm;
// - portable C: int32 sums.
// One register tile of QMM_RO rows of W by QMM_RN input rows reads each W block once for the
// tile's rows; tasks own QMM_ROWS_PER_TASK rows of W, a contiguous stretch read once per
// QMM_RN input rows (decode: once). Each output is summed over its blocks in the same order
// whatever the tile, the task or the thread count, so results are thread-count independent.
// Part of ops.c (compiled once per instruction set).

#define QMM_ROWS_PER_TASK 64
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define QMM_VNNI 1
#define QMM_RO   4
#define QMM_RN   4
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
    size_t ldq;  // bytes between rows of xq: C rounded up to 64 (zero padding)
    int8_t *xq;  // (N, ldq) the input rows quantized
    float *xd;   // (N, nb) their scales
    int32_t *xs; // (N, nb) the sum of each block's int8 values
} QMatmulJob;

static inline float qmm_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kg_f16_to_f32(h);
}

// Row n of the input, quantized per block; the padding past C stays zero.
static void qmm_quant_task(void *ctx, size_t n, int thread) {
    (void)thread;
    const QMatmulJob *j = ctx;
    const size_t C = j->C, nb = C / KG_QBLOCK;
    const float *x = j->inp + n * C;
    int8_t *q = j->xq + n * j->ldq;
    for (size_t b = 0; b < nb; b++) {
        const float *xb = x + b * KG_QBLOCK;
        float amax = 0.0f;
        for (int i = 0; i < KG_QBLOCK; i++) {
            float a = fabsf(xb[i]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        int32_t s = 0;
        for (int i = 0; i < KG_QBLOCK; i++) {
            // adding 1.5 * 2^23 rounds to the nearest integer, ties to even (|x * id| <= 127)
            int v = (int)((xb[i] * id + 12582912.0f) - 12582912.0f);
            q[b * KG_QBLOCK + i] = (int8_t)v;
            s += v;
        }
        j->xd[n * nb + b] = d;
        j->xs[n * nb + b] = s;
    }
}

#if defined(QMM_VNNI)
// Blocks b0 and b0 + 1 (when two) of one W row as 64 u8 (the weight plus its offset) and
// their scales as 16 lanes (8 each).
static inline __attribute__((always_inline)) __m512i qmm_load_w(const uint8_t *blk, int two,
                                                                KgDtype dt, __m512 *dw) {
    const size_t bs = kg_dtype_bytes(dt, KG_QBLOCK);
    uint16_t d0, d1 = 0;
    memcpy(&d0, blk, 2);
    if (two) memcpy(&d1, blk + bs, 2);
    *dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)d1), _mm_set1_epi16((short)d0)));
    if (dt == KG_Q8_0) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
        __m256i hi =
            two ? _mm256_loadu_si256((const __m256i *)(blk + bs + 2)) : _mm256_setzero_si256();
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i v0 = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m128i v1 = two ? _mm_loadu_si128((const __m128i *)(blk + bs + 2)) : _mm_setzero_si128();
    __m256i h0 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v0, 4), m4), _mm_and_si128(v0, m4));
    __m256i h1 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v1, 4), m4), _mm_and_si128(v1, m4));
    return _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
}

// out[n0:n0+rn, o0:o0+ro] from W rows o0.. and input rows n0.. (ro, rn constants once inlined).
static inline __attribute__((always_inline)) void qmm_tile(const QMatmulJob *j, size_t o0,
                                                           size_t n0, int ro, int rn, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    const size_t rb = kg_dtype_bytes(dt, j->C); // one W row
    const int off = dt == KG_Q8_0 ? -128 : -8;
    const uint8_t *w = (const uint8_t *)j->w.data + o0 * rb;
    __m512 acc[QMM_RO][QMM_RN];
    for (int r = 0; r < ro; r++)
        for (int n = 0; n < rn; n++)
            acc[r][n] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i wv[QMM_RO];
        __m512 dw[QMM_RO];
        for (int r = 0; r < ro; r++)
            wv[r] = qmm_load_w(w + r * rb + b * bs, two, dt, &dw[r]);
        for (int n = 0; n < rn; n++) {
            const size_t row = n0 + n;
            __m512i xv = _mm512_loadu_si512((const void *)(j->xq + row * j->ldq + b * KG_QBLOCK));
            const int32_t *s = j->xs + row * nb + b;
            const float *d = j->xd + row * nb + b;
            __m512i x0 = _mm512_castsi128_si512(_mm_cvtsi32_si128(off * s[0]));
            __m512i xo = two ? _mm512_inserti32x4(x0, _mm_cvtsi32_si128(off * s[1]), 2) : x0;
            __m512 dx =
                _mm512_insertf32x8(_mm512_set1_ps(d[0]), _mm256_set1_ps(two ? d[1] : 0.0f), 1);
            for (int r = 0; r < ro; r++) {
                __m512i dot = _mm512_dpbusd_epi32(xo, wv[r], xv);
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
#elif defined(QMM_AVX2)
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

static inline __attribute__((always_inline)) void qmm_tile(const QMatmulJob *j, size_t o0,
                                                           size_t n0, int ro, int rn, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    const size_t rb = kg_dtype_bytes(dt, j->C); // one W row
    const uint8_t *w = (const uint8_t *)j->w.data + o0 * rb;
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
            const size_t row = n0 + n;
            __m256i xv =
                _mm256_loadu_si256((const __m256i *)(j->xq + row * j->ldq + b * KG_QBLOCK));
            const float dx = j->xd[row * nb + b];
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
#else
// The weight at index i of one block, as its signed integer.
static inline int qmm_w(const uint8_t *blk, int i, KgDtype dt) {
    if (dt == KG_Q8_0) return (int8_t)blk[2 + i];
    return (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
}

static inline __attribute__((always_inline)) void qmm_tile(const QMatmulJob *j, size_t o0,
                                                           size_t n0, int ro, int rn, KgDtype dt) {
    const size_t nb = j->C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    const size_t rb = kg_dtype_bytes(dt, j->C); // one W row
    for (int r = 0; r < ro; r++)
        for (int n = 0; n < rn; n++) {
            const size_t o = o0 + (size_t)r, row = n0 + (size_t)n;
            const int8_t *xq = j->xq + row * j->ldq;
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                const uint8_t *blk = (const uint8_t *)j->w.data + o * rb + b * bs;
                int32_t dot = 0;
                for (int i = 0; i < KG_QBLOCK; i++)
                    dot += qmm_w(blk, i, dt) * xq[b * KG_QBLOCK + i];
                acc += (float)dot * (qmm_f16(blk) * j->xd[row * nb + b]);
            }
            j->out[row * j->OC + o] = acc + (j->bias ? j->bias[o] : 0.0f);
        }
}
#endif

// Every tile of rows n0..n0+rn of the input against W rows [o0, o1).
static inline __attribute__((always_inline)) void
qmm_rows(const QMatmulJob *j, size_t o0, size_t o1, size_t n0, int rn, KgDtype dt) {
    size_t o = o0;
    for (; o + QMM_RO <= o1; o += QMM_RO)
        qmm_tile(j, o, n0, QMM_RO, rn, dt);
    for (; o < o1; o++)
        qmm_tile(j, o, n0, 1, rn, dt);
}

static inline __attribute__((always_inline)) void qmm_task_dt(const QMatmulJob *j, size_t o0,
                                                              size_t o1, KgDtype dt) {
    for (size_t n0 = 0; n0 < j->N; n0 += QMM_RN) {
        switch (j->N - n0 < QMM_RN ? j->N - n0 : QMM_RN) { // the row count a constant
        case 1:
            qmm_rows(j, o0, o1, n0, 1, dt);
            break;
        case 2:
            qmm_rows(j, o0, o1, n0, 2, dt);
            break;
        case 3:
            qmm_rows(j, o0, o1, n0, 3, dt);
            break;
        default:
            qmm_rows(j, o0, o1, n0, QMM_RN, dt);
            break;
        }
    }
}

static void qmm_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const QMatmulJob *j = ctx;
    size_t o0 = t * QMM_ROWS_PER_TASK,
           o1 = o0 + QMM_ROWS_PER_TASK < j->OC ? o0 + QMM_ROWS_PER_TASK : j->OC;
    if (j->w.dtype == KG_Q8_0)
        qmm_task_dt(j, o0, o1, KG_Q8_0);
    else
        qmm_task_dt(j, o0, o1, KG_Q4_0);
}

// The quantized path of cpu_matmul_forward: W (OC, C) in blocks. The input's quantized rows
// live in the backend's partial-sum buffer (under its mutex), grown on demand; when it cannot
// grow, the rows go through in chunks that fit it (NaN outputs if not even one row fits: the
// process is then out of memory for a few kilobytes).
static void cpu_matmul_q_forward(KgBackend *be, float *out, const float *inp, KgMat w,
                                 const float *bias, size_t N, size_t C, size_t OC) {
    CpuBackend *cb = cpu_of(be);
    const size_t nb = C / KG_QBLOCK, ldq = (C + 63) / 64 * 64;
    const size_t row_floats = ldq / 4 + 2 * nb; // xq, xd, xs of one row
    pthread_mutex_lock(&cb->partial_mutex);
    if (N * row_floats > cb->partial_cap) {
        float *grown = realloc(cb->partial, N * row_floats * sizeof *grown);
        if (grown) {
            cb->partial = grown;
            cb->partial_cap = N * row_floats;
        }
    }
    size_t chunk = cb->partial_cap / row_floats < N ? cb->partial_cap / row_floats : N;
    if (!chunk)
        for (size_t i = 0; i < N * OC; i++)
            out[i] = NAN;
    for (size_t n0 = 0; chunk && n0 < N; n0 += chunk) {
        const size_t rows = N - n0 < chunk ? N - n0 : chunk;
        QMatmulJob j = {out + n0 * OC, inp + n0 * C, w, bias, rows, C, OC, ldq, NULL, NULL, NULL};
        j.xq = (int8_t *)cb->partial;
        j.xd = cb->partial + rows * ldq / 4;
        j.xs = (int32_t *)(j.xd + rows * nb);
        if (ldq != C)
            for (size_t n = 0; n < rows; n++)
                memset(j.xq + n * ldq + C, 0, ldq - C);
        cpu_pool_run(cb->pool, qmm_quant_task, &j, rows);
        cpu_pool_run(cb->pool, qmm_task, &j, (OC + QMM_ROWS_PER_TASK - 1) / QMM_ROWS_PER_TASK);
    }
    pthread_mutex_unlock(&cb->partial_mutex);
}
