// dtype.h — the element types weights are stored and computed in, apart from any file format.
//
// Quantized types keep ggml's block layouts (ggml-common.h, block_q8_0 / block_q4_0), so a
// GGUF tensor can be used as it is: each run of KG_QBLOCK consecutive weights along the
// reduction dimension (a matrix row of C inputs) is one block, an f16 scale d first.
//   q8_0: {uint16_t d; int8_t qs[32];}   w[i] = d * qs[i]                        34 bytes
//   q4_0: {uint16_t d; uint8_t qs[16];}  w[i] = d * ((qs[i] & 15) - 8),
//                                        w[i + 16] = d * ((qs[i] >> 4) - 8)      18 bytes
// A quantized matrix is always held (OC, C): one row of C / 32 blocks per output.
#ifndef DTYPE_H
#define DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KG_F32,
    KG_F16,
    KG_BF16,
    KG_Q8_0,
    KG_Q4_0,
    KG_DTYPE_OTHER, // any other valid safetensors dtype (I64, U8, F64, ...): parsed, not computed
                    // on
    KG_DTYPE_AUTO   // a load-time choice, not a type: keep the dtype the file stores
} KgDtype;

#define KG_QBLOCK     32 // weights per block
#define KG_Q8_0_BYTES 34 // bytes per q8_0 block
#define KG_Q4_0_BYTES 18 // bytes per q4_0 block

static inline int kg_dtype_quantized(KgDtype t) { return t == KG_Q8_0 || t == KG_Q4_0; }

// Bytes per element of a float dtype: 4, 2, 2; inline so that kernels specialized on a dtype
// get a constant. Not for quantized types (see kg_dtype_bytes).
static inline size_t kg_dtype_size(KgDtype t) { return t == KG_F32 ? 4 : 2; }

// Bytes of n elements (n a multiple of KG_QBLOCK for a quantized type).
static inline size_t kg_dtype_bytes(KgDtype t, size_t n) {
    if (t == KG_Q8_0) return n / KG_QBLOCK * KG_Q8_0_BYTES;
    if (t == KG_Q4_0) return n / KG_QBLOCK * KG_Q4_0_BYTES;
    return n * kg_dtype_size(t);
}

// "F32", "F16", "BF16", "Q8_0", "Q4_0", "auto" ("other" for anything else).
const char *kg_dtype_name(KgDtype t);

// A --dtype value: "auto" -> KG_DTYPE_AUTO, "f32", "f16", "bf16", "q8_0", "q4_0" (either
// case) -> that dtype. KG_OK with *out, else KG_EINVAL with err naming the value and the
// choices ("unknown dtype 'q9': auto, f32, f16, bf16, q8_0 or q4_0"); *out unchanged.
int kg_dtype_parse(const char *name, KgDtype *out, char *err);

// A --precision value: "f32" -> KG_F32, "bf16" -> KG_BF16 (either case). KG_OK with *out,
// else KG_EINVAL with err naming the value; *out unchanged. (f16 would work on a GPU, but
// the CPU has no f16 kernels for it.)
int kg_precision_parse(const char *name, KgDtype *out, char *err);

// The two above as a flag table's parsers (base/flags.h, KG_FLAG_FUNC): field is a KgDtype;
// err names the flag or variable from ("--dtype: unknown dtype 'q9': auto, ...").
int kg_dtype_flag(void *field, const char *value, const char *from, char *err);
int kg_precision_flag(void *field, const char *value, const char *from, char *err);

// dst (n, dtype to) = src (n, dtype from), rounding to nearest even; F32/F16/BF16 only.
void kg_dtype_convert(void *dst, KgDtype to, const void *src, KgDtype from, size_t n);

// dst (rows, C / 32 blocks) = src (rows, C) quantized row by row with ggml's formulas
// (q8_0: d = max|x| / 127, q = round(x / d); q4_0: d = x_m / -8 for the x_m of largest
// magnitude, q = min(15, (int)(x / d + 8.5))). C a multiple of KG_QBLOCK; dt KG_Q8_0/KG_Q4_0.
void kg_quantize_rows(void *dst, KgDtype dt, const float *src, size_t rows, size_t C);

// dst (rows, C) = the weights src (rows, C / 32 blocks of dt) stands for.
void kg_dequantize_rows(float *dst, const void *src, KgDtype dt, size_t rows, size_t C);

#endif
