// test_cpu_matmul.c — the CPU backend's matmul_forward on its edge cases, against a scalar
// reference in double: every ISA this processor has (generic, AVX2, AVX-512), W in f32, f16
// and bf16, stored (C, OC) and transposed, with and without bias, at shapes that cross the
// kernels' boundaries — rows on both sides of the streaming/tiled switch (12 and 16) and of
// the tiled kernel's row tile, channels in below, at and past its block of 96 rows of W,
// channels out below one strip, between strips and with a column tail. Also: the answer is
// bit for bit the same with 1 and 3 threads (each output's sum runs in the same order).
// And with bf16 operands (be->mixed = KG_BF16, --precision bf16): x and W rounded to bf16 at
// any row count (the tiled kernel's vdpbf16ps on AVX512-BF16, the same products emulated
// elsewhere), checked against the reference on the rounded operands, shown to differ from
// the f32 answer, and bit for bit the same on every ISA (the products are exact, and each
// output's sum runs in the same order everywhere); the transposed LM head stays f32.
//
// Tolerance: |out - ref| <= (C + 2) * 2^-24 * sum_k |x_k w_k| + 1e-6 per element: the bound
// on f32 rounding of a sum of C + 1 terms done one after another (blocked and vector sums
// do better), relative to the sum of the terms' magnitudes; the weights' own rounding is
// taken out by computing the reference from the same f16/bf16 values (and, with bf16
// operands, from x and W rounded to bf16: their products are exact in f32 and double).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"
#include "model/kgmath.h"
#include "testmodel.h"

static uint64_t rng = 88172645463325252ull;

typedef struct {
    size_t N, C, OC;
} Shape;

// Runs one case on every ISA this processor has.
static void check_case(const Shape *s, KgDtype dt, int transposed, int with_bias, int bf16) {
    const size_t N = s->N, C = s->C, OC = s->OC;
    const TestModelSpec f32 = {.dtype = KG_F32}, wspec = {.dtype = dt};
    float *x = testmodel_tensor(&f32, N * C, 1.0f, &rng),
          *bias = testmodel_tensor(&f32, OC, 1.0f, &rng);
    void *w = testmodel_tensor(&wspec, C * OC, 1.0f, &rng);
    float *wf = malloc(C * OC * sizeof *wf); // W as the kernel sees it, widened
    double *ref = malloc(N * OC * sizeof *ref), *mag = malloc(N * OC * sizeof *mag),
           *ref_f32 = malloc(N * OC * sizeof *ref_f32); // the operands as given
    float *out1 = malloc(N * OC * sizeof *out1), *out3 = malloc(N * OC * sizeof *out3);
    REQUIRE(x && bias && w && wf && ref && mag && ref_f32 && out1 && out3, "out of memory");
    kg_dtype_convert(wf, KG_F32, w, dt, C * OC);
    for (size_t n = 0; n < N; n++)
        for (size_t o = 0; o < OC; o++) {
            double acc = with_bias ? bias[o] : 0.0, m = fabs(acc), acc_f32 = acc;
            const int rounded = bf16 && !transposed; // the LM head stays f32
            for (size_t k = 0; k < C; k++) {
                float xv = x[n * C + k], wv = wf[transposed ? o * C + k : k * OC + o];
                double p =
                    rounded ? (double)kg_round_bf16(xv) * kg_round_bf16(wv) : (double)xv * wv;
                acc_f32 += (double)xv * wv;
                acc += p;
                m += fabs(p);
            }
            ref[n * OC + o] = acc;
            ref_f32[n * OC + o] = acc_f32;
            mag[n * OC + o] = m;
        }
    KgMat mat = {w, dt, transposed};
    float *first = NULL; // with bf16 operands, the first ISA's answer, for the others
    const char *first_isa = NULL;
    const char *isas[] = {"generic", "avx2", "avx512", "avx512vnni", "avx512bf16"};
    for (int i = 0; i < 5; i++) {
        char err[KG_ERRLEN];
        KgBackend *b1 = kg_cpu_backend_new_isa(1, isas[i], err);
        if (!b1) continue; // this processor lacks the ISA
        KgBackend *b3 = kg_cpu_backend_new_isa(3, isas[i], err);
        REQUIRE(b3, "backend %s: %s", isas[i], err);
        b1->mixed = b3->mixed = bf16 ? KG_BF16 : KG_F32;
        memset(out1, 0xff, N * OC * sizeof *out1); // NaN: an output never written shows
        memset(out3, 0xff, N * OC * sizeof *out3);
        b1->ops->matmul_forward(b1, out1, x, mat, with_bias ? bias : NULL, N, C, OC);
        b3->ops->matmul_forward(b3, out3, x, mat, with_bias ? bias : NULL, N, C, OC);
        size_t bad = 0, differ = 0, moved = 0;
        double worst = 0;
        for (size_t e = 0; e < N * OC; e++) {
            double d = fabs(out1[e] - ref[e]), tol = (double)(C + 2) * 0x1p-24 * mag[e] + 1e-6;
            if (!(d <= tol)) bad++; // NaN counts as bad
            if (fabs(out1[e] - ref_f32[e]) > tol) moved++;
            if (d / (mag[e] + 1e-30) > worst) worst = d / (mag[e] + 1e-30);
            if (memcmp(&out1[e], &out3[e], sizeof(float)) != 0) differ++;
        }
        CHECK_MSG(bad == 0, "%s N=%zu C=%zu OC=%zu dtype=%d%s%s: %zu of %zu outputs off", isas[i],
                  N, C, OC, (int)dt, transposed ? " transposed" : "", with_bias ? " bias" : "", bad,
                  N * OC);
        if (bf16 && !transposed) {
            CHECK_MSG(moved > 0, "%s N=%zu C=%zu OC=%zu dtype=%d bf16: no output moved from f32",
                      isas[i], N, C, OC, (int)dt);
            if (!first) {
                first = malloc(N * OC * sizeof *first);
                REQUIRE(first, "out of memory");
                memcpy(first, out1, N * OC * sizeof *first);
                first_isa = isas[i];
            }
            size_t across = 0;
            for (size_t e = 0; e < N * OC; e++)
                across += memcmp(&out1[e], &first[e], sizeof(float)) != 0;
            CHECK_MSG(across == 0,
                      "N=%zu C=%zu OC=%zu dtype=%d bf16: %zu outputs of %s differ from %s", N, C,
                      OC, (int)dt, across, isas[i], first_isa);
        }
        CHECK_MSG(differ == 0,
                  "%s N=%zu C=%zu OC=%zu dtype=%d%s: %zu outputs differ, 1 vs 3 threads", isas[i],
                  N, C, OC, (int)dt, transposed ? " transposed" : "", differ);
        if (worst > 3e-6)
            printf("  %s N=%zu C=%zu OC=%zu dtype=%d%s: worst |d|/sum|x w| %.2e\n", isas[i], N, C,
                   OC, (int)dt, transposed ? " T" : "", worst);
        kg_backend_free(b1);
        kg_backend_free(b3);
    }
    free(x);
    free(bias);
    free(w);
    free(wf);
    free(ref);
    free(mag);
    free(ref_f32);
    free(first);
    free(out1);
    free(out3);
}

int main(void) {
    // rows: decode, small batches (each count of the streaming kernels' row blocks of 4:
    // 1, 2, 3, and 4 + 2), both sides of the tiled switch (12 f32, 16 half), a partial row
    // tile, past the transposed LM head's sgemm switch (16 f32, 32 half)
    const size_t rows[] = {1, 2, 3, 6, 11, 12, 13, 16, 17, 33};
    // channels in: under one block of W (96 rows; 192 with bf16 operands), exactly one, past
    // it with a short last block (and one of a single row: an odd block, whose last bf16 pair
    // is half padding; 97 is also one odd block of bf16 pairs)
    // channels out: under one strip, a strip and a tail, several strips and a tail
    const Shape io[] = {{0, 50, 5}, {0, 96, 70}, {0, 200, 200}, {0, 8, 129}, {0, 97, 70}};
    const KgDtype dts[] = {KG_F32, KG_F16, KG_BF16};
    // bf16 operands: one streaming row count (stays f32), both sides of the tiled switch
    const size_t rows_bf16[] = {3, 12, 16, 33};
    int cases = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const size_t *rs = bf16 ? rows_bf16 : rows;
        size_t n_rows = bf16 ? sizeof rows_bf16 / sizeof *rows_bf16 : sizeof rows / sizeof *rows;
        for (size_t r = 0; r < n_rows; r++)
            for (size_t s = 0; s < sizeof io / sizeof *io; s++)
                for (int d = 0; d < 3; d++)
                    for (int tr = 0; tr < 2; tr++) {
                        Shape sh = {rs[r], io[s].C, io[s].OC};
                        check_case(&sh, dts[d], tr, (r + s + (size_t)d + (size_t)tr) % 2 == 0,
                                   bf16);
                        cases++;
                    }
    }
    // one case at the KoGPT2 MLP's shape, many rows: whole strips and blocks, no tails
    Shape big = {40, 768, 3072};
    check_case(&big, KG_F16, 0, 1, 0);
    check_case(&big, KG_BF16, 0, 1, 1);
    // decode at the KoGPT2 attention's shape: the streaming kernels' prefetches over whole
    // chunks and rows
    Shape step = {1, 768, 2304};
    check_case(&step, KG_F16, 0, 0, 0);
    check_case(&step, KG_F32, 1, 1, 0);
    // more rows than the tiled kernel's packed x fits in one pass of the scratch (1 Mi floats
    // less a strip, at 96 floats a row: 10854 to 10914 rows by ISA): two passes
    Shape tall = {10920, 8, 64};
    check_case(&tall, KG_F32, 0, 1, 0);
    check_case(&tall, KG_F32, 0, 1, 1);
    printf("%d matmul cases on every ISA of this processor\n", cases + 6);
    return check_report();
}
