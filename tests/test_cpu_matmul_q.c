// test_cpu_matmul_q.c — the q8_0/q4_0 weight dtypes (dtype.h) and the CPU backend's quantized
// matmul (cpu/matmul_q.c).
//
// 1. Quantization: kg_quantize_rows gives byte for byte the blocks of a NumPy reference of
//    ggml's formulas (tests/ref/quant_ref.py, argv[1]; skipped without it), and the round
//    trip is within half a step plus the f16 rounding of the scale: |x - dequant(x)| <=
//    |d| * (1/2 + 127 * 2^-11) (q4_0: |d| * (1 + 8 * 2^-11): the clamp at +7 cuts +8).
// 2. The matmul on every ISA this processor has (generic, AVX2, AVX-512, AVX512-VNNI; the
//    backend forced per ISA), 1 and 3 threads bit for bit equal, against a double-precision
//    reference on the dequantized weights, at row counts on both sides of the decode path (up
//    to 4 rows: one W row at a time) and across the prompt tile (5, 7, 16, 17, 33) and its
//    block of 64 input rows (70), block counts that fill VNNI's groups of four blocks partly
//    (1, 3, 5) or wholly (4, 24, 96), output counts with tile and task tails.
//    Tolerance per output: sum over blocks of (dx_b / 2) * sum_i |w_i| — the int8 rounding
//    of the input (dx_b = max|x| / 127 of the block) — plus 1e-5 * sum |x w| + 1e-6 for the
//    f32 sums and scale products.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"
#include "model/kgmath.h"

static uint64_t rng = 88172645463325252ull;

static float randn(void) {
    float u = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        u += (float)(rng >> 40) / 16777216.0f;
    }
    return (u - 2.0f) * 1.7320508f;
}

static const char *const ISAS[] = {"generic", "avx2", "avx512", "avx512vnni", "avx512bf16"};
#define N_ISAS (sizeof ISAS / sizeof *ISAS)

// Round trip bound on rows of random values with outliers and an all-zero block.
static void check_round_trip(KgDtype dt) {
    const size_t rows = 7, C = 128, nb = C / KG_QBLOCK;
    float *x = malloc(rows * C * sizeof *x), *y = malloc(rows * C * sizeof *y);
    uint8_t *q = malloc(kg_dtype_bytes(dt, rows * C));
    REQUIRE(x && y && q, "out of memory");
    for (size_t i = 0; i < rows * C; i++)
        x[i] = randn() * (i % 37 == 0 ? 20.0f : 1.0f);
    memset(x + 3 * C, 0, KG_QBLOCK * sizeof *x); // a block of zeros: d = 0, all exact
    kg_quantize_rows(q, dt, x, rows, C);
    kg_dequantize_rows(y, q, dt, rows, C);
    size_t bad = 0;
    double worst = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = q + (r * nb + b) * kg_dtype_bytes(dt, KG_QBLOCK);
            float d = fabsf(kg_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8)));
            for (size_t i = 0; i < KG_QBLOCK; i++) {
                size_t e = r * C + b * KG_QBLOCK + i;
                // half a step, plus the f16 rounding of d (2^-11 relative) times the largest
                // code (127; q4_0: 8, and a whole step where the clamp at +7 cuts +8)
                double err = fabs(x[e] - y[e]), tol = d * (0.5 + 127 * 0x1p-11) + 1e-7;
                if (dt == KG_Q4_0) tol = d * (1 + 8 * 0x1p-11) + 1e-7;
                if (!(err <= tol)) bad++;
                if (d > 0 && err / d > worst) worst = err / d;
            }
        }
    CHECK_MSG(bad == 0, "%s round trip: %zu elements off", kg_dtype_name(dt), bad);
    printf("%s round trip: worst |x - deq| / d = %.3f\n", kg_dtype_name(dt), worst);
    free(x);
    free(y);
    free(q);
}

// The NumPy reference's blocks (quant_ref.py: int32 rows, C, then rows * C floats, then the
// q8_0 blocks, then the q4_0 blocks) against ours, byte for byte.
static void check_reference(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { // the fixture did not run (no python3-numpy): nothing to compare with
        printf("SKIP: the byte comparison with NumPy: %s is absent\n", path);
        return;
    }
    int32_t hdr[2];
    REQUIRE(fread(hdr, 4, 2, f) == 2, "cannot read %s", path);
    const size_t rows = (size_t)hdr[0], C = (size_t)hdr[1];
    float *x = malloc(rows * C * sizeof *x);
    uint8_t *want = malloc(kg_dtype_bytes(KG_Q8_0, rows * C)),
            *got = malloc(kg_dtype_bytes(KG_Q8_0, rows * C));
    REQUIRE(x && want && got && fread(x, 4, rows * C, f) == rows * C, "cannot read %s", path);
    const KgDtype dts[] = {KG_Q8_0, KG_Q4_0};
    for (int d = 0; d < 2; d++) {
        size_t bytes = kg_dtype_bytes(dts[d], rows * C), differ = 0;
        REQUIRE(fread(want, 1, bytes, f) == bytes, "%s: short file", path);
        kg_quantize_rows(got, dts[d], x, rows, C);
        for (size_t i = 0; i < bytes; i++)
            differ += got[i] != want[i];
        CHECK_MSG(differ == 0, "%s: %zu of %zu bytes differ from the NumPy reference",
                  kg_dtype_name(dts[d]), differ, bytes);
        printf("%s vs NumPy reference: %zu blocks, %zu bytes differ\n", kg_dtype_name(dts[d]),
               rows * C / KG_QBLOCK, differ);
    }
    fclose(f);
    free(x);
    free(want);
    free(got);
}

static void check_matmul(size_t N, size_t C, size_t OC, KgDtype dt, int with_bias) {
    const size_t nb = C / KG_QBLOCK;
    float *x = malloc(N * C * sizeof *x), *wf = malloc(OC * C * sizeof *wf);
    float *bias = malloc(OC * sizeof *bias), *out1 = malloc(N * OC * sizeof *out1),
          *out3 = malloc(N * OC * sizeof *out3);
    double *ref = malloc(N * OC * sizeof *ref), *tol = malloc(N * OC * sizeof *tol);
    void *wq = malloc(kg_dtype_bytes(dt, OC * C));
    REQUIRE(x && wf && bias && out1 && out3 && ref && tol && wq, "out of memory");
    for (size_t i = 0; i < N * C; i++)
        x[i] = randn();
    for (size_t i = 0; i < OC * C; i++)
        wf[i] = 0.05f * randn();
    for (size_t i = 0; i < OC; i++)
        bias[i] = randn();
    kg_quantize_rows(wq, dt, wf, OC, C);
    kg_dequantize_rows(wf, wq, dt, OC, C); // the weights the kernel stands for
    for (size_t n = 0; n < N; n++)
        for (size_t o = 0; o < OC; o++) {
            double acc = with_bias ? bias[o] : 0.0, mag = 0, round = 0;
            for (size_t b = 0; b < nb; b++) {
                double amax = 0, wabs = 0;
                for (size_t i = 0; i < KG_QBLOCK; i++) {
                    size_t k = b * KG_QBLOCK + i;
                    double p = (double)x[n * C + k] * wf[o * C + k];
                    acc += p;
                    mag += fabs(p);
                    amax = fmax(amax, fabs(x[n * C + k]));
                    wabs += fabs(wf[o * C + k]);
                }
                round += amax / 127 / 2 * wabs;
            }
            ref[n * OC + o] = acc;
            tol[n * OC + o] = round * (1 + 1e-5) + 1e-5 * mag + 1e-6;
        }
    KgMat mat = {wq, dt, 1};
    for (size_t i = 0; i < N_ISAS; i++) {
        char err[KG_ERRLEN];
        KgBackend *b1 = kg_cpu_backend_new_isa(1, ISAS[i], err);
        if (!b1) continue; // this processor lacks the ISA
        KgBackend *b3 = kg_cpu_backend_new_isa(3, ISAS[i], err);
        REQUIRE(b3, "backend %s: %s", ISAS[i], err);
        memset(out1, 0xff, N * OC * sizeof *out1); // NaN: an output never written shows
        memset(out3, 0xff, N * OC * sizeof *out3);
        b1->ops->matmul_forward(b1, out1, x, mat, with_bias ? bias : NULL, N, C, OC);
        b3->ops->matmul_forward(b3, out3, x, mat, with_bias ? bias : NULL, N, C, OC);
        size_t bad = 0, differ = 0;
        for (size_t e = 0; e < N * OC; e++) {
            if (!(fabs(out1[e] - ref[e]) <= tol[e])) bad++; // NaN counts as bad
            if (memcmp(&out1[e], &out3[e], sizeof(float)) != 0) differ++;
        }
        CHECK_MSG(bad == 0, "%s %s N=%zu C=%zu OC=%zu: %zu of %zu outputs off", ISAS[i],
                  kg_dtype_name(dt), N, C, OC, bad, N * OC);
        CHECK_MSG(differ == 0, "%s %s N=%zu C=%zu OC=%zu: %zu outputs differ, 1 vs 3 threads",
                  ISAS[i], kg_dtype_name(dt), N, C, OC, differ);
        kg_backend_free(b1);
        kg_backend_free(b3);
    }
    free(x);
    free(wf);
    free(bias);
    free(out1);
    free(out3);
    free(ref);
    free(tol);
    free(wq);
}

int main(int argc, char **argv) {
    check_round_trip(KG_Q8_0);
    check_round_trip(KG_Q4_0);
    if (argc > 1)
        check_reference(argv[1]);
    else
        printf("SKIP: the byte comparison with NumPy: no reference file given\n");
    for (size_t i = 0; i < N_ISAS; i++) {
        char err[KG_ERRLEN];
        KgBackend *be = kg_cpu_backend_new_isa(1, ISAS[i], err);
        printf("isa %-10s %s\n", ISAS[i], be ? "tested" : "not on this processor");
        kg_backend_free(be);
    }
    const size_t rows[] = {1, 2, 3, 4, 5, 7, 16, 17, 33};
    const size_t io[][2] = {{32, 5}, {96, 70}, {128, 129}, {768, 130}, {64, 1}};
    int cases = 0;
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
        for (size_t s = 0; s < sizeof io / sizeof *io; s++)
            for (int d = 0; d < 2; d++, cases++)
                check_matmul(rows[r], io[s][0], io[s][1], d ? KG_Q4_0 : KG_Q8_0, (r + s) % 2 == 0);
    check_matmul(40, 3072, 768, KG_Q8_0, 1); // the KoGPT2 MLP projection, many rows
    check_matmul(40, 768, 300, KG_Q4_0, 1);
    check_matmul(70, 160, 67, KG_Q8_0, 0); // two blocks of input rows, a group and a block
    check_matmul(70, 160, 67, KG_Q4_0, 1);
    check_matmul(1, 3072, 301, KG_Q4_0, 1); // decode: 24 groups a row, task tails
    check_matmul(3, 3072, 301, KG_Q8_0, 0);
    printf("%d quantized matmul cases on every ISA of this processor\n", cases + 6);
    return check_report();
}
