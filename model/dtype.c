// dtype.c — names, conversions and block quantization of the weight dtypes (dtype.h).
#include "dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "base/kg.h"
#include "kgmath.h"

static const char *const NAMES[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0"};

const char *kg_dtype_name(KgDtype t) {
    if (t == KG_DTYPE_AUTO) return "auto";
    return (unsigned)t < sizeof NAMES / sizeof NAMES[0] ? NAMES[t] : "other";
}

int kg_dtype_parse(const char *name, KgDtype *out, char *err) {
    if (!strcasecmp(name, "auto")) {
        *out = KG_DTYPE_AUTO;
        return KG_OK;
    }
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (!strcasecmp(name, NAMES[i])) {
            *out = (KgDtype)i;
            return KG_OK;
        }
    char shown[41];
    return kg_err(err, KG_EINVAL, "unknown dtype '%s': auto, f32, f16, bf16, q8_0 or q4_0",
                  kg_show(shown, sizeof shown, name, strlen(name)));
}

int kg_precision_parse(const char *name, KgDtype *out, char *err) {
    if (!strcasecmp(name, "f32") || !strcasecmp(name, "bf16")) {
        *out = !strcasecmp(name, "f32") ? KG_F32 : KG_BF16;
        return KG_OK;
    }
    char shown[41];
    return kg_err(err, KG_EINVAL, "unknown precision '%s': f32 or bf16",
                  kg_show(shown, sizeof shown, name, strlen(name)));
}

int kg_dtype_flag(void *field, const char *value, const char *from, char *err) {
    char why[KG_ERRLEN];
    if (kg_dtype_parse(value, field, why)) return kg_err(err, KG_EINVAL, "%s: %s", from, why);
    return KG_OK;
}

int kg_precision_flag(void *field, const char *value, const char *from, char *err) {
    char why[KG_ERRLEN];
    if (kg_precision_parse(value, field, why)) return kg_err(err, KG_EINVAL, "%s: %s", from, why);
    return KG_OK;
}

void kg_dtype_convert(void *dst, KgDtype to, const void *src, KgDtype from, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = from == KG_F32   ? ((const float *)src)[i]
                  : from == KG_F16 ? kg_f16_to_f32(((const uint16_t *)src)[i])
                                   : kg_bf16_to_f32(((const uint16_t *)src)[i]);
        if (to == KG_F32)
            ((float *)dst)[i] = v;
        else
            ((uint16_t *)dst)[i] = to == KG_F16 ? kg_f32_to_f16(v) : kg_f32_to_bf16(v);
    }
}

// One q8_0 block (34 bytes) from x (32).
static void quantize_q8_0(uint8_t *blk, const float *x) {
    float amax = 0.0f;
    for (int i = 0; i < KG_QBLOCK; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    uint16_t dh = kg_f32_to_f16(d);
    memcpy(blk, &dh, 2);
    for (int i = 0; i < KG_QBLOCK; i++)
        blk[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
}

// One q4_0 block (18 bytes) from x (32): element i in the low nibble of byte i, element
// i + 16 in its high nibble.
static void quantize_q4_0(uint8_t *blk, const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < KG_QBLOCK; i++)
        if (amax < fabsf(x[i])) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    uint16_t dh = kg_f32_to_f16(d);
    memcpy(blk, &dh, 2);
    for (int i = 0; i < KG_QBLOCK / 2; i++) {
        int lo = (int8_t)(x[i] * id + 8.5f), hi = (int8_t)(x[i + 16] * id + 8.5f);
        lo = lo < 15 ? lo : 15;
        hi = hi < 15 ? hi : 15;
        blk[2 + i] = (uint8_t)(lo | hi << 4);
    }
}

void kg_quantize_rows(void *dst, KgDtype dt, const float *src, size_t rows, size_t C) {
    const size_t nb = C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    uint8_t *out = dst;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const float *x = src + r * C + b * KG_QBLOCK;
            uint8_t *blk = out + (r * nb + b) * bs;
            if (dt == KG_Q8_0)
                quantize_q8_0(blk, x);
            else
                quantize_q4_0(blk, x);
        }
}

void kg_dequantize_rows(float *dst, const void *src, KgDtype dt, size_t rows, size_t C) {
    const size_t nb = C / KG_QBLOCK, bs = kg_dtype_bytes(dt, KG_QBLOCK);
    const uint8_t *in = src;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = in + (r * nb + b) * bs;
            float *y = dst + r * C + b * KG_QBLOCK;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            const float d = kg_f16_to_f32(dh);
            for (int i = 0; i < KG_QBLOCK; i++)
                y[i] = dt == KG_Q8_0 ? d * (int8_t)blk[2 + i]
                       : i < 16      ? d * ((blk[2 + i] & 15) - 8)
                                     : d * ((blk[2 + i - 16] >> 4) - 8);
        }
}
