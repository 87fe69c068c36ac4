/* qc_dtype.c — storage dtypes of weight tensors and exact scalar conversions.
 *
 * bf16 -> f32 and f16 -> f32 are exact (every bf16 / f16 value is an f32 value).
 * f32 -> bf16 / f16 round to nearest, ties to even; NaN stays NaN (quiet), Inf stays Inf,
 * f16 subnormals are produced and read exactly. Q8_0 (llama.cpp blocks of 34 bytes: f16 d +
 * 32 int8, include/qc/qc_model.h) widens exactly too: |q| <= 127 has 7 significant bits and d
 * 11, so d * q fits in fp32's 24.
 */
#include <string.h>
#include <strings.h>

#include "qc/qc_model.h"

/* ==== Names and sizes ==== */

const char *qc_dtype_str(qc_dtype t) {
    switch (t) {
    case QC_F32: return "F32";
    case QC_BF16: return "BF16";
    case QC_F16: return "F16";
    case QC_Q8_0: return "Q8_0";
    case QC_I8: return "I8";
    }
    return "?";
}

qc_status qc_dtype_parse(const char *s, const char *what, qc_dtype *out, qc_err *err) {
    if (s && !strcasecmp(s, "bf16")) *out = QC_BF16;
    else if (s && !strcasecmp(s, "f32")) *out = QC_F32;
    else if (s && !strcasecmp(s, "f16")) *out = QC_F16;
    else if (s && !strcasecmp(s, "q8_0")) *out = QC_Q8_0;
    else
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not bf16, f32, f16 or q8_0", what,
                       s ? s : "");
    return QC_OK;
}

size_t qc_dtype_size(qc_dtype t) {
    switch (t) {
    case QC_F32: return 4;
    case QC_BF16: return 2;
    case QC_F16: return 2;
    case QC_Q8_0: return 1;
    case QC_I8: return 1;
    }
    return 0;
}

size_t qc_dtype_row_bytes(qc_dtype t, int64_t n) {
    if (n <= 0) return 0;
    if (t == QC_Q8_0) return (size_t)n / QC_Q8_0_BLOCK * QC_Q8_0_BLOCK_BYTES;
    return (size_t)n * qc_dtype_size(t);
}

/* ==== Bit casts ==== */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ==== bf16 ==== */

float qc_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t qc_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb; /* round to nearest even; overflow carries into Inf correctly */
    return (uint16_t)(x >> 16);
}

/* ==== f16 (IEEE binary16) ==== */

float qc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13)); /* Inf / NaN */
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in f32 */
        float v = (float)m * bits_f32(0x33800000u); /* 2^-24 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t qc_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {
        if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu)); /* qNaN */
        return (uint16_t)(sign | 0x7c00u);                                             /* Inf */
    }
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
    if (x < 0x38800000u) {                                   /* below 2^-14: subnormal or 0 */
        if (x <= 0x33000000u) return sign;                   /* <= 2^-25 rounds to (even) 0 */
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t e = (x >> 23) - 112u;
    uint32_t m = x & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

/* ==== Tensor views ==== */

size_t qc_tensor_numel(const qc_tensor *t) {
    if (!t || t->ndim <= 0) return 0;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

size_t qc_tensor_bytes(const qc_tensor *t) {
    if (!t || t->ndim <= 0) return 0;
    return qc_dtype_row_bytes(t->dtype, (int64_t)qc_tensor_numel(t));
}

/* Element i of a Q8_0 block array: d * q, exact in fp32 */
static inline float q8_0_get(const unsigned char *p, size_t i) {
    const unsigned char *b = p + i / QC_Q8_0_BLOCK * QC_Q8_0_BLOCK_BYTES;
    uint16_t d;
    memcpy(&d, b, 2);
    return qc_f16_to_f32(d) * (float)(int8_t)b[2 + i % QC_Q8_0_BLOCK];
}

float qc_tensor_get(const qc_tensor *t, size_t i) {
    const unsigned char *p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case QC_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case QC_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return qc_bf16_to_f32(h);
    }
    case QC_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return qc_f16_to_f32(h);
    }
    case QC_Q8_0: return q8_0_get(p, i);
    case QC_I8: return (float)(int8_t)p[i];
    }
    QC_ASSERT(!"bad dtype");
    return 0.0f;
}

void qc_tensor_to_f32(const qc_tensor *t, float *dst) {
    size_t n = qc_tensor_numel(t);
    const unsigned char *p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case QC_F32: memcpy(dst, p, 4 * n); return;
    case QC_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = qc_bf16_to_f32(h);
        }
        return;
    case QC_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = qc_f16_to_f32(h);
        }
        return;
    case QC_Q8_0:
        for (size_t i = 0; i < n; i++) dst[i] = q8_0_get(p, i);
        return;
    case QC_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)(int8_t)p[i];
        return;
    }
    QC_ASSERT(!"bad dtype");
}
