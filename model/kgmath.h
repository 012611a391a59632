// kgmath.h — scalar element-wise math shared by the CPU kernels and the CUDA kernels
// (KG_HD makes each function __host__ __device__ under nvcc), so both backends compute
// GELU, half-precision conversions and the exponential the same way, and the CPU unit
// tests cover what the GPU runs.
//
// The functions are branch-free where it matters so that a loop calling them vectorizes
// (the CPU kernels are compiled with -O3 for AVX2 and AVX-512).
#ifndef KGMATH_H
#define KGMATH_H

#include <stdint.h>
#include <string.h>

#include "config.h"

#ifdef __CUDACC__
#define KG_HD __host__ __device__ __forceinline__
#else
#define KG_HD static inline
#endif

KG_HD float kg_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

KG_HD uint32_t kg_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// IEEE half -> float, exact for every input (normals, subnormals, inf, NaN).
// Normals and inf/NaN: shift the exponent/mantissa into place and rescale by 2^-112;
// subnormals: place the mantissa under a 0.5 exponent and subtract 0.5.
KG_HD float kg_f16_to_f32(uint16_t h) {
    uint32_t w = (uint32_t)h << 16;
    uint32_t sign = w & 0x80000000u;
    uint32_t two_w = w + w;
    float normalized = kg_bits_to_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    float denormalized = kg_bits_to_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t bits = two_w < (1u << 27) ? kg_f32_to_bits(denormalized) : kg_f32_to_bits(normalized);
    return kg_bits_to_f32(sign | bits);
}

// float -> IEEE half with round-to-nearest-even; overflow gives inf, NaN stays NaN.
KG_HD uint16_t kg_f32_to_f16(float f) {
    uint32_t w = kg_f32_to_bits(f);
    uint32_t sign = (w >> 16) & 0x8000u;
    uint32_t abs = w & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  // NaN
    if (abs >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                                   // half subnormal or zero
        // adding 0.5 aligns the mantissa so the FPU's own rounding does round-to-even
        float r = kg_bits_to_f32(abs) + 0.5f;
        return (uint16_t)(sign | (kg_f32_to_bits(r) - kg_f32_to_bits(0.5f)));
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xC8000FFFu + mant_odd; // rebias exponent (-112 << 23) and round to nearest even
    return (uint16_t)(sign | (abs >> 13));
}

// bfloat16 is the upper half of a float.
KG_HD float kg_bf16_to_f32(uint16_t h) { return kg_bits_to_f32((uint32_t)h << 16); }

// float -> bfloat16 with round-to-nearest-even; NaN stays NaN.
KG_HD uint16_t kg_f32_to_bf16(float f) {
    uint32_t w = kg_f32_to_bits(f);
    if ((w & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((w >> 16) | 0x40u);
    w += 0x7FFFu + ((w >> 16) & 1u);
    return (uint16_t)(w >> 16);
}

// x rounded to the nearest bfloat16 (ties to even), as a float.
KG_HD float kg_round_bf16(float x) { return kg_bf16_to_f32(kg_f32_to_bf16(x)); }

// e^x for float, about 1 ulp: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6
// polynomial, 2^n put into the exponent bits. Gives 0 below -87.33 (the smallest normal),
// +inf above 88.72, NaN for NaN. Ternaries rather than fminf/fmaxf keep it vectorizable
// and keep the float-to-int conversion defined for every input.
KG_HD float kg_expf(float x) {
    const float lo = -87.33654f, hi = 88.72283f;
    float xc = x > lo ? x : lo; // NaN becomes lo here; it is restored at the end
    xc = xc < hi ? xc : hi;
    float n = __builtin_rintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693145751953125f; // ln2 split in two for an exact reduction
    r = r - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^n as two factors so that n = 128 (x near 88.7) does not overflow the exponent field
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1;
    float s1 = kg_bits_to_f32((uint32_t)(n1 + 127) << 23);
    float s2 = kg_bits_to_f32((uint32_t)(ni - n1 + 127) << 23);
    float y = p * s1 * s2;
    y = x < lo ? 0.0f : y;
    y = x > hi ? __builtin_inff() : y;
    return x != x ? x : y;
}

// tanh through e^{2x}: exact limits at +-inf, absolute error ~1e-7 near 0.
KG_HD float kg_tanhf(float x) {
    float e = kg_expf(2.0f * x);
    return 1.0f - 2.0f / (e + 1.0f);
}

// erf(x) = 1 - erfc(|x|) with sign: erfc by the Chebyshev-fitted approximation
// t exp(-z^2 + P(t)), t = 1/(1 + z/2) (Numerical Recipes "erfcc"), fractional error
// below 1.2e-7 for every z >= 0.
KG_HD float kg_erff(float x) {
    float z = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + 0.5f * z);
    float poly =
        -1.26551223f +
        t * (1.00002368f +
             t * (0.37409196f +
                  t * (0.09678418f +
                       t * (-0.18628806f +
                            t * (0.27886807f + t * (-1.13520398f +
                                                    t * (1.48851587f + t * (-0.82215223f +
                                                                            t * 0.17087277f))))))));
    float erfc = t * kg_expf(-z * z + poly);
    float r = 1.0f - erfc;
    return x < 0 ? -r : r;
}

#define KG_SQRT_2_OVER_PI 0.7978845608028654f
#define KG_GELU_TANH_K    0.044715f
#define KG_INV_SQRT2      0.7071067811865476f
#define KG_INV_SQRT_2PI   0.3989422804014327f

// GELU, tanh approximation ("gelu_new", GPT-2 and KoGPT2 v2):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
KG_HD float kg_gelu_tanh(float x) {
    float u = KG_SQRT_2_OVER_PI * (x + KG_GELU_TANH_K * x * x * x);
    return 0.5f * x * (1.0f + kg_tanhf(u));
}

// d gelu_tanh / dx
KG_HD float kg_gelu_tanh_grad(float x) {
    float u = KG_SQRT_2_OVER_PI * (x + KG_GELU_TANH_K * x * x * x);
    float th = kg_tanhf(u);
    float du = KG_SQRT_2_OVER_PI * (1.0f + 3.0f * KG_GELU_TANH_K * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// GELU, exact ("gelu", KoGPT2 v1): 0.5 x (1 + erf(x / sqrt 2))
KG_HD float kg_gelu_erf(float x) { return 0.5f * x * (1.0f + kg_erff(x * KG_INV_SQRT2)); }

// d gelu_erf / dx = Phi(x) + x phi(x)
KG_HD float kg_gelu_erf_grad(float x) {
    float cdf = 0.5f * (1.0f + kg_erff(x * KG_INV_SQRT2));
    return cdf + x * KG_INV_SQRT_2PI * kg_expf(-0.5f * x * x);
}

// ReLU ("relu"): max(x, 0), and its derivative (0 at x = 0, as torch's)
KG_HD float kg_relu(float x) { return x > 0.0f ? x : 0.0f; }
KG_HD float kg_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

// The MLP's activation of kind (a Gpt2Gelu, config.h) and its derivative: the one switch the
// GPU kernels share (the CPU loops keep theirs outside the loop, so each loop vectorizes).
KG_HD float kg_activation(float x, int kind) {
    return kind == GPT2_GELU_ERF ? kg_gelu_erf(x)
           : kind == GPT2_RELU   ? kg_relu(x)
                                 : kg_gelu_tanh(x);
}
KG_HD float kg_activation_grad(float x, int kind) {
    return kind == GPT2_GELU_ERF ? kg_gelu_erf_grad(x)
           : kind == GPT2_RELU   ? kg_relu_grad(x)
                                 : kg_gelu_tanh_grad(x);
}

// One element's AdamW step (decoupled weight decay, bias correction on), in place on
// *param, *m, *v. g is the gradient, b1c = 1 - beta1^t and b2c = 1 - beta2^t for step
// t >= 1, wd the weight decay (0 for biases and layer norms):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   param -= lr (m / b1c / (sqrt(v / b2c) + eps) + wd param)
KG_HD void kg_adamw_update(float *param, float *m, float *v, float g, float lr, float beta1,
                           float beta2, float eps, float wd, float b1c, float b2c) {
    float mt = beta1 * *m + (1.0f - beta1) * g;
    float vt = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mt;
    *v = vt;
    float mhat = mt / b1c, vhat = vt / b2c;
    *param -= lr * (mhat / (__builtin_sqrtf(vhat) + eps) + wd * *param);
}

#endif
