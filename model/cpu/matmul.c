// matmul.c — out (N, OC) = inp (N, C) @ W (C, OC) + bias, W in f32, f16 or bf16, stored
// (C, OC) (Conv1D, in x out) or transposed (OC, C) (the tied LM head).
// N = rows, C = channels in, OC = channels out.
//
// Two regimes, measured in bench/bench_model.c:
// - few rows (decode, small batches): memory bound. Each task owns a stretch of W's rows
//   and streams it exactly once, widening f16/bf16 in registers, so a decode step reads every
//   weight byte once and reads half the bytes from f16 files.
// - more rows (prompts): compute bound. A register-tiled kernel over W packed block by block
//   into per-thread scratch (widened to f32 there once, for all the rows; or rounded to bf16
//   pairs, below). It is 20-40 %
//   faster than OpenBLAS sgemm at 16 to 64 rows (sgemm's packing walks W down its columns,
//   which the prefetcher does not follow) and matches it at 512, so OpenBLAS is left with
//   the transposed LM head over many rows and the backward pass.
// With bf16 operands (be->mixed == KG_BF16, --precision bf16) both kernels multiply x and W
// rounded to bf16, with f32 sums, over the layers' matrices at any row count (a request's
// answer then does not depend on what it was batched with); the transposed LM head stays f32.
// Part of ops.c (compiled once per instruction set).

// From this many rows on, the tiled kernel; below, the streaming kernel. Measured on the
// layers of the KoGPT2-base shape, 2 threads (Xeon, AVX-512), time streaming / tiled:
// f32 8 rows 1.0, 12 rows 1.3, 16 rows 1.3, 24 rows 1.7; f16 (which the streaming kernel
// reads at half the bytes) 8 rows 0.8, 12 rows 0.96, 16 rows 1.08, 24 rows 1.28.
#define MATMUL_TILE_MIN_ROWS_F32  12
#define MATMUL_TILE_MIN_ROWS_HALF 16
// Below this many rows the transposed LM head uses the streaming kernel, from here OpenBLAS
// sgemm. Measured before the tiled kernel, on a (768, 3072) Conv1D matrix, 1 thread: f32
// crossed over near 16 rows, f16 near 32 (sgemm first needs f32 panels); not measured again
// on the transposed head, which only prompt scoring and training's evaluation run with
// many rows.
#define MATMUL_SGEMM_MIN_ROWS_F32  16
#define MATMUL_SGEMM_MIN_ROWS_HALF 32
// Row chunks of W in the streaming kernel: each a contiguous stretch read by one task.
#define MATMUL_K_CHUNKS  8
#define MATMUL_ROW_BLOCK 4 // rows sharing one pass over W in the streaming kernel
#define MATMUL_PASS_ROWS 8 // rows of W combined per pass (16 measured within noise of 8)
// Output columns per sgemm call. Fixed, not derived from the thread count, so that the
// numbers do not change with --threads (each column's sum runs the same way).
#define MATMUL_SGEMM_COLS 256

typedef struct {
    float *out;
    const float *inp;
    KgMat w;
    const float *bias;
    size_t N, C, OC;
    size_t cols_per_task; // output columns per task (W rows of the transposed LM head)
    float **scratch;      // per-thread scratch (tiled kernel: packed W and x; sgemm: widened W)
    float *partial;       // (k_chunks, N, OC) the streaming kernel's partial sums
    size_t rows_per_chunk, k_chunks;
    int bf16; // the tiled kernel multiplies bf16 operands (be->mixed == KG_BF16)
} MatmulJob;

// A scalar operand as the kernels multiply it: rounded to bf16 with bf16 operands.
static inline float operand(float v, int bf16) { return bf16 ? kg_round_bf16(v) : v; }

// Streaming kernel, W (C, OC): out (nb rows, OC apart) += x[n0:n0+nb, k0:k1] @ W[k0:k1, :],
// nb <= MATMUL_ROW_BLOCK (a constant once inlined). MATMUL_PASS_ROWS rows of W at a time are
// combined into the output rows, which stay in L1/L2 while W streams past once. Those rows
// are MATMUL_PASS_ROWS streams OC apart, which the hardware prefetcher does not keep ahead
// of: each pass asks for the next pass's rows at the same column into L2, once per cache line.
// That doubled the f32 layers' read speed (KoGPT2-base, one thread, Zen 4: 12 -> 19-23 GB/s;
// f16 10-13 -> 17-19 GB/s); prefetcht0 a pass ahead, into L1, gained half of it (the lines
// were evicted before their use), and so did the old linear prefetch of the next pass.
static inline __attribute__((always_inline)) void matmul_rows_block(const MatmulJob *j, float *out,
                                                                    size_t n0, int nb, size_t k0,
                                                                    size_t k1, KgDtype dt,
                                                                    const int bf16) {
    enum { R = MATMUL_PASS_ROWS };
    const size_t C = j->C, OC = j->OC;
    const float *x = j->inp + n0 * C;
    const size_t jv = OC / VLEN * VLEN; // vector part [0, jv), scalar tail
    const void *w = j->w.data;
    const size_t es = kg_dtype_size(dt);
    size_t k = k0;
    for (; k + R <= k1; k += R) {
        const char *next = (const char *)w + (k + R) * OC * es; // the next R rows, contiguous
        vf xb[MATMUL_ROW_BLOCK][R];
        for (int n = 0; n < nb; n++)
            for (int r = 0; r < R; r++)
                xb[n][r] = vf_set1(operand(x[n * C + k + r], bf16));
        for (size_t c = 0; c < jv; c += VLEN) {
            // row r of the next pass at this column, once per cache line
            if (k + 2 * R <= k1 && (c * es) % 64 == 0)
                for (int r = 0; r < R; r++)
                    prefetch_l2(next + (r * OC + c) * es, 1);
            vf wv[R];
            for (int r = 0; r < R; r++) {
                wv[r] = vf_load_as(w, dt, (k + r) * OC + c);
                if (bf16 && dt != KG_BF16) wv[r] = (vf)vf_round_bf16(wv[r]);
            }
            for (int n = 0; n < nb; n++) {
                vf o = vf_load(out + n * OC + c);
                for (int r = 0; r < R; r++)
                    o += xb[n][r] * wv[r];
                vf_store(out + n * OC + c, o);
            }
        }
        for (size_t c = jv; c < OC; c++)
            for (int n = 0; n < nb; n++)
                for (size_t kk = k; kk < k + R; kk++)
                    out[n * OC + c] +=
                        operand(x[n * C + kk], bf16) * operand(load_as(w, dt, kk * OC + c), bf16);
    }
    for (; k < k1; k++)
        for (int n = 0; n < nb; n++)
            for (size_t c = 0; c < OC; c++)
                out[n * OC + c] +=
                    operand(x[n * C + k], bf16) * operand(load_as(w, dt, k * OC + c), bf16);
}

// Streaming kernel, W transposed (OC, C): each output is a dot product of two contiguous
// rows. One W row at a time, against up to MATMUL_T_ROWS input rows (nr, a constant once
// inlined): W is read once, front to back, a single sequential stream per task that the
// hardware prefetcher follows. Four W rows at a time (four streams 1.5 KB apart, with
// software prefetch) read the KoGPT2 LM head at about half the speed (f16, one thread, Zen 4:
// 8.6 against 21.9 GB/s on a standalone copy of both loops).
#define MATMUL_T_ROWS 4
// Bytes ahead asked for into L2 (f16 LM head, one thread: 512 bytes ahead 24 GB/s, none 14)
#define MATMUL_T_PREFETCH 512
// Tasks per thread: contiguous runs of W rows claimed in turn, so that a thread the OS delays
// is covered by the others (each output is one task's, so the split does not change results).
#define MATMUL_T_TASKS_PER_THREAD 4
static inline __attribute__((always_inline)) void matmul_row_t(const MatmulJob *j, size_t c,
                                                               size_t n0, int nr, KgDtype dt) {
    const size_t C = j->C;
    const void *w = j->w.data;
    const float *x = j->inp + n0 * C;
    const size_t es = kg_dtype_size(dt);
    vf a0[MATMUL_T_ROWS], a1[MATMUL_T_ROWS]; // two chains per row: FMA latency, not loads
    for (int n = 0; n < nr; n++)
        a0[n] = a1[n] = (vf){0};
    size_t k = 0;
    for (; k + 2 * VLEN <= C; k += 2 * VLEN) {
        prefetch_l2((const char *)w + (c * C + k) * es + MATMUL_T_PREFETCH, 2 * VLEN * es);
        vf w0 = vf_load_as(w, dt, c * C + k), w1 = vf_load_as(w, dt, c * C + k + VLEN);
        for (int n = 0; n < nr; n++) {
            a0[n] += vf_load(x + n * C + k) * w0;
            a1[n] += vf_load(x + n * C + k + VLEN) * w1;
        }
    }
    for (; k + VLEN <= C; k += VLEN) {
        vf w0 = vf_load_as(w, dt, c * C + k);
        for (int n = 0; n < nr; n++)
            a0[n] += vf_load(x + n * C + k) * w0;
    }
    for (int n = 0; n < nr; n++) {
        float s = vf_sum(a0[n] + a1[n]);
        for (size_t kk = k; kk < C; kk++)
            s += x[n * C + kk] * load_as(w, dt, c * C + kk);
        j->out[(n0 + n) * j->OC + c] = s + (j->bias ? j->bias[c] : 0.0f);
    }
}

// Outputs [j0, j1) of every row: W rows j0.. one after another.
static inline __attribute__((always_inline)) void matmul_rows_t(const MatmulJob *j, size_t j0,
                                                                size_t j1, KgDtype dt) {
    for (size_t c = j0; c < j1; c++)
        for (size_t n0 = 0; n0 < j->N; n0 += MATMUL_T_ROWS) {
            switch (j->N - n0 < MATMUL_T_ROWS ? j->N - n0 : MATMUL_T_ROWS) {
            case 1:
                matmul_row_t(j, c, n0, 1, dt);
                break;
            case 2:
                matmul_row_t(j, c, n0, 2, dt);
                break;
            case 3:
                matmul_row_t(j, c, n0, 3, dt);
                break;
            default:
                matmul_row_t(j, c, n0, MATMUL_T_ROWS, dt);
                break;
            }
        }
}

// Tiled kernel, W (C, OC), N >= MATMUL_TILE_MIN_ROWS_*. A task owns a slice of output
// columns and walks W's rows in blocks of TILE_KB. Per block, x of every row is packed once
// (k-major, tile by tile: the broadcasts then read consecutive floats instead of TILE_R rows
// C apart); then strip after strip of the slice (TILE_KB rows x TILE_V * VLEN columns) is
// packed, widened to f32 (or as bf16 pairs, below), into the thread's scratch and every row tile of
// the output is computed from it. An output tile of TILE_R rows x TILE_V vectors stays in registers
// while k runs over the block; per k, TILE_V loads of the strip and TILE_R broadcasts of x feed
// TILE_R * TILE_V FMAs, so the loop is bound by FMAs, not loads. While a strip's first row
// tile runs, the next strip's rows of W are asked for into L2, one row per k, so that
// reading W overlaps the FMAs instead of coming before them. At 20 rows reading W takes as
// long as the FMAs: packing the whole block's slice first, then the FMAs, took 1.55x the time
// of this order (KoGPT2-base layers, one thread, Zen 4; f16 1.5x, 12 rows 1.9x, 64 rows
// 1.2x; at 512 rows within 5 %, the wide matrices a little slower: their output tiles
// now walk down 512 rows). Without the prefetch this order is no faster than the old one,
// and prefetcht0 (into L1) recovers only 10-25 % of the gain. Each output's sum runs over k
// in order, whatever the thread count.
// With bf16 operands (--precision bf16) x and the strip are packed rounded to bf16, in pairs
// of k, and a step takes a pair: one vdpbf16ps per accumulator does two k at the FMA's rate
// (a 512-token prompt at the KoGPT2-base shape, bf16 weights, one thread, Zen 4: 376 -> 779
// tok/s). Where the CPU lacks AVX512-BF16 the same products are emulated, slower than f32.
#if VLEN == 16
#define TILE_V 4 // 24 accumulators of the 32 vector registers
#else
#define TILE_V 2 // 12 of 16
#endif
#define TILE_R 6
// Rows of W per packed block. 32, 64, 96 and 128 measured: 96 and 128 best, within noise of
// each other and ~10 % ahead of 32; at 96 a strip (96 x TILE_V * VLEN floats, 24 KB with
// AVX-512) stays in L1 while the row tiles pass over it. With bf16 operands a block is
// 2 * TILE_KB rows, in TILE_KB pairs: the same bytes of strip and packed x (192 against 96
// rows: prompts of 64 and 512 tokens 3-5 % faster, KoGPT2-base, 2 threads, Zen 4).
#define TILE_KB 96
// Scratch floats before the packed x: the strip, and a cache line to align it.
#define TILE_STRIP_FLOATS (TILE_KB * TILE_V * VLEN + 16)

// strip (k1 - k0, TILE_V * VLEN) <- W[k0:k1, c:c + TILE_V * VLEN] widened to f32.
static inline __attribute__((always_inline)) void
matmul_pack_strip(float *strip, const MatmulJob *j, size_t c, size_t k0, size_t k1, KgDtype dt) {
    const size_t tw = TILE_V * VLEN;
    for (size_t k = k0; k < k1; k++)
        for (size_t v = 0; v < tw; v += VLEN)
            vf_store(strip + (k - k0) * tw + v, vf_load_as(j->w.data, dt, k * j->OC + c + v));
}

// As matmul_pack_strip for bf16 operands: strip ((k1 - k0 + 1) / 2, TILE_V * VLEN) holds the
// rows of W in pairs (k, k + 1) rounded to bf16, the layout vdpbf16ps reads (an odd block's
// last pair has a zero for its k + 1).
static inline __attribute__((always_inline)) void matmul_pack_strip_bf16(uint32_t *strip,
                                                                         const MatmulJob *j,
                                                                         size_t c, size_t k0,
                                                                         size_t k1, KgDtype dt) {
    const size_t tw = TILE_V * VLEN;
    if (dt == KG_BF16) { // already bf16: the two rows interleaved, nothing to round
        const uint16_t *w = j->w.data;
        for (size_t k = k0; k < k1; k += 2)
            for (size_t v = 0; v < tw; v += VLEN) {
                vh lo, hi = {0};
                memcpy(&lo, w + k * j->OC + c + v, sizeof lo);
                if (k + 1 < k1) memcpy(&hi, w + (k + 1) * j->OC + c + v, sizeof hi);
                vu pairs = __builtin_convertvector(lo, vu) | __builtin_convertvector(hi, vu) << 16;
                memcpy(strip + (k - k0) / 2 * tw + v, &pairs, sizeof pairs);
            }
        return;
    }
    for (size_t k = k0; k < k1; k += 2)
        for (size_t v = 0; v < tw; v += VLEN) {
            vf lo = vf_load_as(j->w.data, dt, k * j->OC + c + v),
               hi = k + 1 < k1 ? vf_load_as(j->w.data, dt, (k + 1) * j->OC + c + v) : (vf){0};
            vu pairs = vu_bf16_pairs(lo, hi);
            memcpy(strip + (k - k0) / 2 * tw + v, &pairs, sizeof pairs);
        }
}

// xt <- x[:, k0:k1] of every row, tile by tile: rows n0..n0+TILE_R as (k1 - k0, TILE_R) at
// xt + n0 * TILE_KB.
static void matmul_pack_x(float *xt, const MatmulJob *j, size_t k0, size_t k1) {
    const size_t N = j->N, C = j->C;
    for (size_t n0 = 0; n0 < N; n0 += TILE_R) {
        size_t nr = N - n0 < TILE_R ? N - n0 : TILE_R;
        float *t = xt + n0 * TILE_KB;
        for (size_t k = k0; k < k1; k++)
            for (size_t r = 0; r < nr; r++)
                t[(k - k0) * TILE_R + r] = j->inp[(n0 + r) * C + k];
    }
}

// As matmul_pack_x for bf16 operands: (x[k], x[k + 1]) rounded to bf16 in one uint32, so a
// tile is ((k1 - k0 + 1) / 2, TILE_R) pairs, at the same place (xt + n0 * TILE_KB).
static void matmul_pack_x_bf16(uint32_t *xt, const MatmulJob *j, size_t k0, size_t k1) {
    const size_t N = j->N, C = j->C;
    for (size_t n0 = 0; n0 < N; n0 += TILE_R) {
        size_t nr = N - n0 < TILE_R ? N - n0 : TILE_R;
        uint32_t *t = xt + n0 * TILE_KB;
        for (size_t k = k0; k < k1; k += 2)
            for (size_t r = 0; r < nr; r++) {
                const float *x = j->inp + (n0 + r) * C + k;
                uint32_t hi = k + 1 < k1 ? kg_f32_to_bf16(x[1]) : 0;
                t[(k - k0) / 2 * TILE_R + r] = kg_f32_to_bf16(x[0]) | hi << 16;
            }
    }
}

// Where the next strip's rows of W start, pf_ld bytes apart, pf_bytes each, pf_rows of them
// (0: no strip follows).
typedef struct {
    const char *pf;
    size_t pf_ld, pf_bytes, pf_rows;
} MatmulNext;

// out[n0:n0+nr, c:c+TILE_V*VLEN] (+)= xt @ strip over the block k0..k1, with xt the rows'
// x packed (k1 - k0, TILE_R) and strip (k1 - k0, TILE_V * VLEN) in f32, or both in bf16
// pairs (bf16, a constant once inlined: half as many steps, each one vdpbf16ps per
// accumulator doing two k); the bias after the last block. Row k of the next strip is asked
// for at step k (at step k / 2 with pairs).
static inline __attribute__((always_inline)) void
matmul_tile(const MatmulJob *j, const void *xt, const void *strip, size_t n0, size_t c, size_t k0,
            size_t k1, int nr, const MatmulNext *next, const int bf16) {
    const size_t OC = j->OC;
    float *out = j->out + n0 * OC + c;
    vf acc[TILE_R][TILE_V];
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < TILE_V; v++)
            acc[r][v] = k0 ? vf_load(out + r * OC + v * VLEN) : (vf){0};
    if (bf16) {
        const uint32_t *xp = xt, *sp = strip;
#pragma GCC unroll 2 // two pairs a turn: the f32 loop's four k
        for (size_t p = 0; p < (k1 - k0 + 1) / 2; p++) {
            for (size_t k = 2 * p; k < 2 * p + 2 && k < next->pf_rows; k++)
                prefetch_l2(next->pf + k * next->pf_ld, next->pf_bytes);
            vu w[TILE_V];
            memcpy(w, sp + p * TILE_V * VLEN, sizeof w);
            for (int r = 0; r < nr; r++)
                for (int v = 0; v < TILE_V; v++)
                    acc[r][v] = vf_dot_bf16(acc[r][v], xp[p * TILE_R + r], w[v]);
        }
    } else {
        const float *xf = xt, *sf = strip;
#pragma GCC unroll 4 // the counter and branch then cost less per FMA (~3 % at 512 rows)
        for (size_t k = 0; k < k1 - k0; k++) {
            if (k < next->pf_rows) prefetch_l2(next->pf + k * next->pf_ld, next->pf_bytes);
            const float *p = sf + k * TILE_V * VLEN;
            for (int r = 0; r < nr; r++) {
                float xk = xf[k * TILE_R + r];
                for (int v = 0; v < TILE_V; v++)
                    acc[r][v] += xk * vf_load(p + v * VLEN);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int v = 0; v < TILE_V; v++) {
            if (k1 == j->C && j->bias) acc[r][v] += vf_load(j->bias + c + v * VLEN);
            vf_store(out + r * OC + v * VLEN, acc[r][v]);
        }
}

// One packed strip (columns c..) against every row tile. The first row tile asks for the
// next strip.
static inline __attribute__((always_inline)) void
matmul_strip_as(const MatmulJob *j, const void *strip, const void *xt, size_t c, size_t k0,
                size_t k1, const MatmulNext *next, const int bf16) {
    const MatmulNext none = {NULL, 0, 0, 0};
    for (size_t n0 = 0; n0 < j->N; n0 += TILE_R) {
        size_t nr = j->N - n0 < TILE_R ? j->N - n0 : TILE_R;
        const uint32_t *t = (const uint32_t *)xt + n0 * TILE_KB; // 4-byte units either way
        const MatmulNext *nx = n0 ? &none : next;
        switch (nr) { // the row count a constant in each copy
        case 1:
            matmul_tile(j, t, strip, n0, c, k0, k1, 1, nx, bf16);
            break;
        case 2:
            matmul_tile(j, t, strip, n0, c, k0, k1, 2, nx, bf16);
            break;
        case 3:
            matmul_tile(j, t, strip, n0, c, k0, k1, 3, nx, bf16);
            break;
        case 4:
            matmul_tile(j, t, strip, n0, c, k0, k1, 4, nx, bf16);
            break;
        case 5:
            matmul_tile(j, t, strip, n0, c, k0, k1, 5, nx, bf16);
            break;
        default:
            matmul_tile(j, t, strip, n0, c, k0, k1, TILE_R, nx, bf16);
            break;
        }
    }
}

// The dtype of W is gone once it is packed, so this is compiled once per ISA and operand
// type, not once per dtype.
static void matmul_strip(const MatmulJob *j, const void *strip, const void *xt, size_t c, size_t k0,
                         size_t k1, const MatmulNext *next) {
    if (j->bf16)
        matmul_strip_as(j, strip, xt, c, k0, k1, next, 1);
    else
        matmul_strip_as(j, strip, xt, c, k0, k1, next, 0);
}

// Columns [c0, c1) of the output, every row, by tiles; columns past the last whole tile
// (OC not a multiple of TILE_V * VLEN) one at a time, in the same order of k (bf16 pairs:
// k + 1 before k, as vdpbf16ps adds them). scratch holds
// the strip, then every row's packed x (TILE_KB floats a row).
static inline __attribute__((always_inline)) void matmul_tiles(const MatmulJob *j, float *scratch,
                                                               size_t c0, size_t c1, KgDtype dt) {
    const size_t N = j->N, C = j->C, OC = j->OC, tw = TILE_V * VLEN, es = kg_dtype_size(dt);
    const size_t cv = c0 + (c1 - c0) / tw * tw;
    float *strip = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); // whole lines
    float *xt = scratch + TILE_STRIP_FLOATS;
    const size_t kb = j->bf16 ? 2 * TILE_KB : TILE_KB; // pairs take the room of one float
    for (size_t k0 = 0; k0 < C && c0 < cv; k0 += kb) {
        size_t k1 = k0 + kb < C ? k0 + kb : C;
        if (j->bf16)
            matmul_pack_x_bf16((uint32_t *)xt, j, k0, k1);
        else
            matmul_pack_x(xt, j, k0, k1);
        for (size_t c = c0; c < cv; c += tw) {
            if (j->bf16)
                matmul_pack_strip_bf16((uint32_t *)strip, j, c, k0, k1, dt);
            else
                matmul_pack_strip(strip, j, c, k0, k1, dt);
            // the next strip: this block's next one, or the next block's first
            size_t nc = c + tw < cv ? c + tw : c0, nk0 = c + tw < cv ? k0 : k1;
            size_t nk1 = nk0 + kb < C ? nk0 + kb : C;
            MatmulNext next = {(const char *)j->w.data + (nk0 * OC + nc) * es, OC * es, tw * es,
                               nk0 < C ? nk1 - nk0 : 0};
            matmul_strip(j, strip, xt, c, k0, k1, &next);
        }
    }
    for (size_t n = 0; n < N; n++)
        for (size_t c = cv; c < c1; c++) {
            float s = 0.0f;
            if (j->bf16) // the tiles' order: pairs (k, k + 1), k even, k + 1 added first
                for (size_t k = 0; k < C; k += 2) {
                    if (k + 1 < C)
                        s += kg_round_bf16(j->inp[n * C + k + 1]) *
                             kg_round_bf16(load_as(j->w.data, dt, (k + 1) * OC + c));
                    s += kg_round_bf16(j->inp[n * C + k]) *
                         kg_round_bf16(load_as(j->w.data, dt, k * OC + c));
                }
            else
                for (size_t k = 0; k < C; k++)
                    s += j->inp[n * C + k] * load_as(j->w.data, dt, k * OC + c);
            j->out[n * OC + c] = s + (j->bias ? j->bias[c] : 0.0f);
        }
}

static void matmul_tile_task(void *ctx, size_t t, int thread) {
    const MatmulJob *j = ctx;
    float *scratch = j->scratch[thread];
    size_t c0 = t * j->cols_per_task,
           c1 = c0 + j->cols_per_task < j->OC ? c0 + j->cols_per_task : j->OC;
    switch (j->w.dtype) {
    case KG_F16:
        matmul_tiles(j, scratch, c0, c1, KG_F16);
        break;
    case KG_BF16:
        matmul_tiles(j, scratch, c0, c1, KG_BF16);
        break;
    default:
        matmul_tiles(j, scratch, c0, c1, KG_F32);
        break;
    }
}

// One task of the streaming path. W (C, OC) is split by rows: task t reads rows
// [t * rows_per_chunk, ...) of W, a contiguous stretch of memory, into its own partial sums,
// which matmul_reduce_task adds up. Transposed W is split by its rows too (= output columns),
// each task writing its own outputs.
static inline __attribute__((always_inline)) void matmul_stream(const MatmulJob *j, size_t t,
                                                                KgDtype dt, const int bf16) {
    if (j->w.transposed) {
        size_t j0 = t * j->cols_per_task, j1 = j0 + j->cols_per_task;
        matmul_rows_t(j, j0, j1 < j->OC ? j1 : j->OC, dt);
        return;
    }
    size_t k0 = t * j->rows_per_chunk,
           k1 = k0 + j->rows_per_chunk < j->C ? k0 + j->rows_per_chunk : j->C;
    float *part = j->partial + t * j->N * j->OC;
    memset(part, 0, j->N * j->OC * sizeof *part);
    for (size_t n0 = 0; n0 < j->N; n0 += MATMUL_ROW_BLOCK) {
        switch (j->N - n0 < MATMUL_ROW_BLOCK ? j->N - n0 : MATMUL_ROW_BLOCK) {
        case 1:
            matmul_rows_block(j, part + n0 * j->OC, n0, 1, k0, k1, dt, bf16);
            break;
        case 2:
            matmul_rows_block(j, part + n0 * j->OC, n0, 2, k0, k1, dt, bf16);
            break;
        case 3:
            matmul_rows_block(j, part + n0 * j->OC, n0, 3, k0, k1, dt, bf16);
            break;
        default:
            matmul_rows_block(j, part + n0 * j->OC, n0, MATMUL_ROW_BLOCK, k0, k1, dt, bf16);
            break;
        }
    }
}

// out[:, cols of task t] = bias + the partial sums of every chunk, added in chunk order
// (the same order whatever the thread count).
static void matmul_reduce_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const MatmulJob *j = ctx;
    size_t c0 = t * j->cols_per_task,
           c1 = c0 + j->cols_per_task < j->OC ? c0 + j->cols_per_task : j->OC;
    for (size_t n = 0; n < j->N; n++) {
        float *o = j->out + n * j->OC;
        for (size_t c = c0; c < c1; c++)
            o[c] = j->bias ? j->bias[c] : 0.0f;
        for (size_t k = 0; k < j->k_chunks; k++) {
            const float *p = j->partial + (k * j->N + n) * j->OC;
            for (size_t c = c0; c < c1; c++)
                o[c] += p[c];
        }
    }
}

static void matmul_stream_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const MatmulJob *j = ctx;
    switch (j->w.dtype) { // one specialized copy of the loops per dtype and operand type
    case KG_F16:
        if (j->bf16)
            matmul_stream(j, t, KG_F16, 1);
        else
            matmul_stream(j, t, KG_F16, 0);
        break;
    case KG_BF16:
        if (j->bf16)
            matmul_stream(j, t, KG_BF16, 1);
        else
            matmul_stream(j, t, KG_BF16, 0);
        break;
    default:
        if (j->bf16)
            matmul_stream(j, t, KG_F32, 1);
        else
            matmul_stream(j, t, KG_F32, 0);
        break;
    }
}

#ifdef KG_HAVE_OPENBLAS
// The transposed LM head over many rows. Rows [j0, j0 + w) of W (OC, C) widened to f32 into
// panel, kept (w, C).
static void widen_rows(float *panel, const MatmulJob *j, size_t j0, size_t w) {
    const uint16_t *src = (const uint16_t *)j->w.data + j0 * j->C;
    const size_t n = w * j->C;
    const int f16 = j->w.dtype == KG_F16;
    size_t i = 0;
    if (f16)
        for (; i + VLEN <= n; i += VLEN)
            vf_store(panel + i, vf_load_f16(src + i));
    else
        for (; i + VLEN <= n; i += VLEN)
            vf_store(panel + i, vf_load_bf16(src + i));
    for (; i < n; i++)
        panel[i] = f16 ? kg_f16_to_f32(src[i]) : kg_bf16_to_f32(src[i]);
}

// out[:, j0:j0+w] = inp @ Wrows^T + bias, with Wrows (w, C).
static void sgemm_slice(const MatmulJob *j, const float *wrows, size_t j0, size_t w) {
    float beta = 0.0f;
    if (j->bias) {
        for (size_t n = 0; n < j->N; n++)
            memcpy(j->out + n * j->OC + j0, j->bias + j0, w * 4);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->N, (int)w, (int)j->C, 1.0f, j->inp,
                (int)j->C, wrows, (int)j->C, beta, j->out + j0, (int)j->OC);
}

static void matmul_sgemm_task(void *ctx, size_t t, int thread) {
    const MatmulJob *j = ctx;
    size_t j0 = t * j->cols_per_task, j1 = j0 + j->cols_per_task;
    if (j1 > j->OC) j1 = j->OC;
    if (j->w.dtype == KG_F32) {
        sgemm_slice(j, (const float *)j->w.data + j0 * j->C, j0, j1 - j0);
        return;
    }
    size_t pw = CPU_SCRATCH_FLOATS / j->C; // rows that fit the scratch
    for (size_t c = j0; c < j1; c += pw) {
        size_t w = j1 - c < pw ? j1 - c : pw;
        widen_rows(j->scratch[thread], j, c, w);
        sgemm_slice(j, j->scratch[thread], c, w);
    }
}
#endif

static void cpu_matmul_forward(KgBackend *be, float *out, const float *inp, KgMat w,
                               const float *bias, size_t N, size_t C, size_t OC) {
    CpuBackend *cb = cpu_of(be);
    MatmulJob j = {.out = out,
                   .inp = inp,
                   .w = w,
                   .bias = bias,
                   .N = N,
                   .C = C,
                   .OC = OC,
                   .scratch = cb->scratch};
    if (N == 0 || OC == 0) return; // an empty batch (config.c rejects zero sizes)
    size_t threads = (size_t)cpu_pool_threads(cb->pool);
    size_t tile_min = w.dtype == KG_F32 ? MATMUL_TILE_MIN_ROWS_F32 : MATMUL_TILE_MIN_ROWS_HALF;
    j.bf16 = be->mixed == KG_BF16 && !w.transposed; // the layers' matrices, not the LM head
    if (N >= tile_min && !w.transposed) {
        // one slice of whole strips per thread (more tasks measured slower: each packs the x
        // rows again); as many rows at a time as their packed x fits the scratch
        size_t tw = TILE_V * VLEN, strips = (OC + tw - 1) / tw;
        j.cols_per_task = (strips + threads - 1) / threads * tw;
        const size_t fit = (CPU_SCRATCH_FLOATS - TILE_STRIP_FLOATS) / TILE_KB / TILE_R * TILE_R;
        for (size_t n0 = 0; n0 < N; n0 += fit) {
            j.N = N - n0 < fit ? N - n0 : fit;
            j.inp = inp + n0 * C;
            j.out = out + n0 * OC;
            cpu_pool_run(cb->pool, matmul_tile_task, &j,
                         (OC + j.cols_per_task - 1) / j.cols_per_task);
        }
        return;
    }
#ifdef KG_HAVE_OPENBLAS
    size_t min_rows = w.dtype == KG_F32 ? MATMUL_SGEMM_MIN_ROWS_F32 : MATMUL_SGEMM_MIN_ROWS_HALF;
    // the scratch must hold one row of W for the widened path
    if (w.transposed && N >= min_rows && (w.dtype == KG_F32 || C <= CPU_SCRATCH_FLOATS)) {
        j.cols_per_task = MATMUL_SGEMM_COLS;
        cpu_pool_run(cb->pool, matmul_sgemm_task, &j,
                     (OC + MATMUL_SGEMM_COLS - 1) / MATMUL_SGEMM_COLS);
        return;
    }
#endif
    if (w.transposed) { // a few contiguous runs of W's rows (output columns) per thread
        j.cols_per_task =
            (OC + threads * MATMUL_T_TASKS_PER_THREAD - 1) / (threads * MATMUL_T_TASKS_PER_THREAD);
        cpu_pool_run(cb->pool, matmul_stream_task, &j,
                     (OC + j.cols_per_task - 1) / j.cols_per_task);
        return;
    }
    // a fixed number of row chunks, so the sums do not depend on the thread count
    const size_t R = MATMUL_PASS_ROWS;
    j.k_chunks = C / R < MATMUL_K_CHUNKS ? (C + R - 1) / R : MATMUL_K_CHUNKS;
    j.rows_per_chunk = ((C + j.k_chunks - 1) / j.k_chunks + R - 1) / R * R;
    j.k_chunks = (C + j.rows_per_chunk - 1) / j.rows_per_chunk;
    pthread_mutex_lock(&cb->partial_mutex);
    size_t need = j.k_chunks * N * OC;
    float *grown = need > cb->partial_cap ? realloc(cb->partial, need * sizeof *grown) : NULL;
    if (grown) {
        cb->partial = grown;
        cb->partial_cap = need;
    }
    j.partial = cb->partial;
    if (need > cb->partial_cap) { // no memory for partial sums: one chunk, summed in place
        j.k_chunks = 1;
        j.rows_per_chunk = C;
        j.partial = out;
    }
    cpu_pool_run(cb->pool, matmul_stream_task, &j, j.k_chunks);
    if (j.partial == out) { // summed in place: only the bias is left to add
        for (size_t n = 0; bias && n < N; n++)
            for (size_t c = 0; c < OC; c++)
                out[n * OC + c] += bias[c];
    } else {
        j.cols_per_task = ((OC + threads - 1) / threads + VLEN - 1) / VLEN * VLEN;
        cpu_pool_run(cb->pool, matmul_reduce_task, &j,
                     (OC + j.cols_per_task - 1) / j.cols_per_task);
    }
    pthread_mutex_unlock(&cb->partial_mutex);
}

// ---------------------------------------------------------------------------------------
// Backward (training: f32 weights). Tasks split the outputs: dinp by column slices of C,
// dw (and dbias) by slices of OC, so no two tasks write the same float.

typedef struct {
    float *dinp, *dw, *dbias;
    const float *dout, *inp, *w;
    int transposed;
    size_t N, C, OC, c_tasks; // tasks [0, c_tasks) do dinp, the rest dw
} MatmulBackJob;

#ifdef KG_HAVE_OPENBLAS
// dinp[:, c0:c0+cw] += dout (N, OC) @ W^T restricted to those columns.
static void matmul_dinp_slice(const MatmulBackJob *j, size_t c0, size_t cw) {
    if (j->transposed) // W (OC, C): W^T's columns c0.. are W's columns c0..
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->N, (int)cw, (int)j->OC, 1.0f,
                    j->dout, (int)j->OC, j->w + c0, (int)j->C, 1.0f, j->dinp + c0, (int)j->C);
    else // W (C, OC): W^T's columns c0.. are W's rows c0..
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->N, (int)cw, (int)j->OC, 1.0f,
                    j->dout, (int)j->OC, j->w + c0 * j->OC, (int)j->OC, 1.0f, j->dinp + c0,
                    (int)j->C);
}

// dw for output columns o0..o0+ow: inp^T (C, N) @ dout[:, o0:o0+ow].
static void matmul_dw_slice(const MatmulBackJob *j, size_t o0, size_t ow) {
    if (j->transposed) // dw (OC, C): its rows o0..
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ow, (int)j->C, (int)j->N, 1.0f,
                    j->dout + o0, (int)j->OC, j->inp, (int)j->C, 1.0f, j->dw + o0 * j->C,
                    (int)j->C);
    else // dw (C, OC): its columns o0..
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)j->C, (int)ow, (int)j->N, 1.0f,
                    j->inp, (int)j->C, j->dout + o0, (int)j->OC, 1.0f, j->dw + o0, (int)j->OC);
}
#else
static void matmul_dinp_slice(const MatmulBackJob *j, size_t c0, size_t cw) {
    for (size_t n = 0; n < j->N; n++)
        for (size_t c = c0; c < c0 + cw; c++) {
            float s = 0.0f;
            for (size_t o = 0; o < j->OC; o++)
                s += j->dout[n * j->OC + o] *
                     (j->transposed ? j->w[o * j->C + c] : j->w[c * j->OC + o]);
            j->dinp[n * j->C + c] += s;
        }
}

static void matmul_dw_slice(const MatmulBackJob *j, size_t o0, size_t ow) {
    for (size_t n = 0; n < j->N; n++)
        for (size_t c = 0; c < j->C; c++) {
            float x = j->inp[n * j->C + c];
            for (size_t o = o0; o < o0 + ow; o++) {
                float d = x * j->dout[n * j->OC + o];
                if (j->transposed)
                    j->dw[o * j->C + c] += d;
                else
                    j->dw[c * j->OC + o] += d;
            }
        }
}
#endif

static void matmul_backward_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const MatmulBackJob *j = ctx;
    if (t < j->c_tasks) {
        size_t c0 = t * MATMUL_SGEMM_COLS;
        matmul_dinp_slice(j, c0, j->C - c0 < MATMUL_SGEMM_COLS ? j->C - c0 : MATMUL_SGEMM_COLS);
        return;
    }
    size_t o0 = (t - j->c_tasks) * MATMUL_SGEMM_COLS;
    size_t ow = j->OC - o0 < MATMUL_SGEMM_COLS ? j->OC - o0 : MATMUL_SGEMM_COLS;
    matmul_dw_slice(j, o0, ow);
    if (j->dbias)
        for (size_t n = 0; n < j->N; n++)
            for (size_t o = o0; o < o0 + ow; o++)
                j->dbias[o] += j->dout[n * j->OC + o];
}

static void cpu_matmul_backward(KgBackend *be, float *dinp, float *dw, float *dbias,
                                const float *dout, const float *inp, KgMat w, size_t N, size_t C,
                                size_t OC) {
    MatmulBackJob j = {.dinp = dinp,
                       .dw = dw,
                       .dbias = dbias,
                       .dout = dout,
                       .inp = inp,
                       .w = w.data,
                       .transposed = w.transposed,
                       .N = N,
                       .C = C,
                       .OC = OC,
                       .c_tasks = (C + MATMUL_SGEMM_COLS - 1) / MATMUL_SGEMM_COLS};
    size_t o_tasks = (OC + MATMUL_SGEMM_COLS - 1) / MATMUL_SGEMM_COLS;
    cpu_pool_run(cpu_of(be)->pool, matmul_backward_task, &j, j.c_tasks + o_tasks);
}
