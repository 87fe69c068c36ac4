/* qc_opt_kernels_amx.c — the AMX GEMM (AMX-TILE + AMX-BF16, `tdpbf16ps`): the optimized
 * backend's prefill projections of BF16 weights on CPUs that have AMX (qc_opt_linear.c; on by
 * default where the CPU and the OS allow it, option amx=0 turns it off: qc_opt_options.c).
 *
 * Numerics: float32 activations kept to 16 significant bits. Each activation is split in two
 * bf16, hi = rne(x) and lo = rne(x - hi) (x - hi is exact in fp32), and W x is computed as
 * W hi + W lo: a BF16 weight times a bf16 is exact in fp32, the products are accumulated in
 * fp32. What is lost is x - hi - lo, at most 2^-17 |x| (the fp32 accumulation of a K = 1024
 * dot product already rounds about 2^-24 sqrt(K) = 2^-19 of its magnitude), so the results stay
 * within the float32 policy (docs/performance.md has the fixtures' figures), unlike bf16_dot,
 * which rounds x to one bf16. The tile unit flushes denormal inputs and outputs to zero
 * (|x| < 1.2e-38; a lo part under it is lost, i.e. below 2^-126 absolute) and rounds to nearest
 * even. A finite |x| within 2^-9 of FLT_MAX rounds its hi part to infinity (not a value a
 * model's activation takes). Bit-identical for any thread count: an output element is one C
 * tile element accumulated over the k steps in order, hi then lo, whatever rows and tokens
 * share its tile; only the k padding (Kp, a multiple of 32) changes the sum's shape.
 *
 * Layouts (uint32 = a pair of bf16, the lower half the even k; a k step = 32 k = 16 pairs):
 *   panel [Kp/32][2][16][16]: per k step two B tiles, rows 0..15 and 16..31 of the panel;
 *     tile row p, column n = pair p of weight row n (the VNNI layout tdpbf16ps wants: a
 *     16 x 16 transpose of the rows' pairs); zeros past mr and K
 *   strip [Kp/32][4][16][16]: per k step four A tiles: hi of tokens 0..15, hi of 16..31, lo of
 *     0..15, lo of 16..31; tile row t = the token's 16 pairs of the step; zeros past nt and K
 * Micro tile: 32 tokens x 32 rows = four C tiles [16 tokens][16 rows] (stored straight into y
 * when whole); per k step two B and four A tile loads, eight tdpbf16ps of 16 x 16 x 32.
 *
 * Q8_0 weights (amx_q8): a k step is one block; its int8 values are exact in bf16, so the
 * tiles give each block's dot product of the three terms, which is scaled by the row's d and
 * added to an fp32 accumulator in block order (the reference multiplies d q per element, then
 * sums: the same sum in another order). Its panel adds the 32 rows' d of each block.
 *
 * AMX needs the process's permission (Linux arch_prctl ARCH_REQ_XCOMP_PERM, asked once by
 * qc_opt_amx_pick) and a tile configuration in every thread that uses the tiles: begin() loads
 * it, end() releases the tiles (tile_item in qc_opt_linear.c brackets its strips with them).
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "qc_opt_kernels.h"

#define TAMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,amx-tile,amx-bf16")))
#define MR 32
#define NR 32
#define KSTEP 32                      /* k per tile step */
#define PANEL_STEP (2 * 16 * 16)      /* uint32 per k step of a panel */
#define STRIP_STEP (6 * 16 * 16)      /* uint32 per k step of a strip */

/* ---- packing ---- */

/* 16 x 16 uint32 transpose in registers: r[i] (row i) -> r[j] (column j) */
TAMX static void tr16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) { /* u[g + j], lane L: rows g..g+3 at column 4 L + j */
        u[g + 0] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i alo = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
        const __m512i ahi = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        const __m512i blo = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        const __m512i bhi = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_i32x4(alo, blo, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(alo, blo, 0xDD);
        r[8 + j] = _mm512_shuffle_i32x4(ahi, bhi, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(ahi, bhi, 0xDD);
    }
}

/* rows r0..r0+mr-1 of the BF16 matrix W [., K] -> panel [Kp/32][2][16][16] (Kp = K rounded up
 * to 32) */
TAMX static void amx_pack_w(uint32_t *panel, const void *W, int K, int mr) {
    const uint16_t *w = W;
    const int Kp = (K + KSTEP - 1) / KSTEP * KSTEP;
    for (int k0 = 0; k0 < Kp; k0 += KSTEP) {
        const int m = K - k0 < KSTEP ? K - k0 : KSTEP; /* k of this step inside K */
        const __mmask32 km = m == KSTEP ? ~(__mmask32)0 : (((__mmask32)1 << m) - 1);
        for (int h = 0; h < 2; h++) {
            __m512i r[16];
            for (int n = 0; n < 16; n++) {
                const int row = 16 * h + n;
                r[n] = row < mr ? _mm512_maskz_loadu_epi16(km, w + (size_t)row * K + k0)
                                : _mm512_setzero_si512();
            }
            tr16(r);
            uint32_t *dst = panel + (size_t)(k0 / KSTEP) * PANEL_STEP + h * 256;
            for (int p = 0; p < 16; p++) _mm512_storeu_si512((void *)(dst + p * 16), r[p]);
        }
    }
}

/* tokens of x (row stride ldx) -> strip [Kp/32][4][16][16]: hi and lo pairs */
TAMX static void amx_pack_x(uint32_t *strip, const float *x, int ldx, int K, int nt) {
    const int Kp = (K + KSTEP - 1) / KSTEP * KSTEP;
    for (int k0 = 0; k0 < Kp; k0 += KSTEP) {
        uint32_t *dst = strip + (size_t)(k0 / KSTEP) * STRIP_STEP;
        for (int t = 0; t < NR; t++) {
            __m512 v[2];
            for (int half = 0; half < 2; half++) {
                const int kk = k0 + 16 * half, mk = K - kk < 16 ? (K - kk > 0 ? K - kk : 0) : 16;
                v[half] = t < nt && mk > 0 ? _mm512_maskz_loadu_ps((__mmask16)((1u << mk) - 1),
                                                                   x + (size_t)t * ldx + kk)
                                           : _mm512_setzero_ps();
            }
            /* _mm512_cvtne2ps_pbh(a, b): b's 16 bf16 in the lower half, a's in the upper */
            const __m512bh hi = _mm512_cvtne2ps_pbh(v[1], v[0]);
            const __m512i hiw = (__m512i)hi;
            /* hi back to fp32: the bf16 in the top half of each lane */
            const __m512 h0 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hiw)), 16));
            const __m512 h1 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hiw, 1)), 16));
            /* the remainders are exact in fp32; mid and lo the same way */
            const __m512 r0 = _mm512_sub_ps(v[0], h0), r1 = _mm512_sub_ps(v[1], h1);
            const __m512i midw = (__m512i)_mm512_cvtne2ps_pbh(r1, r0);
            const __m512 m0 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(midw)), 16));
            const __m512 m1 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(midw, 1)), 16));
            const __m512bh lo = _mm512_cvtne2ps_pbh(_mm512_sub_ps(r1, m1), _mm512_sub_ps(r0, m0));
            uint32_t *row = dst + (t / 16) * 256 + (t % 16) * 16;
            _mm512_storeu_si512((void *)row, hiw);
            _mm512_storeu_si512((void *)(row + 512), midw);
            _mm512_storeu_si512((void *)(row + 1024), (__m512i)lo);
        }
    }
}

/* ---- the tiles ---- */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i */
    uint8_t rows[16];   /* rows of tile i */
} amx_cfg;

/* tiles 0..7: 16 rows x 64 bytes. A static table: GCC 12 drops the stores of a local one
 * before ldtilecfg (it does not see the instruction read them), and the #GP of a zeroed
 * config is a SIGSEGV */
static const amx_cfg amx_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

TAMX static void amx_begin(void) { _tile_loadconfig(&amx_config); }

TAMX static void amx_end(void) { _tile_release(); }

/* y[t*ldy + r] = sum over the k steps of panel(r, .) . (hi + lo)(., t), r < mr, t < nt;
 * begin() must have run in this thread */
TAMX static void amx_gemm_tile(const uint32_t *panel, const uint32_t *strip, int Kp, float *y,
                               long ldy, int mr, int nt) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    const int steps = (Kp + KSTEP - 1) / KSTEP;
    for (int s = 0; s < steps; s++) {
        const uint32_t *ws = panel + (size_t)s * PANEL_STEP, *xs = strip + (size_t)s * STRIP_STEP;
        _tile_loadd(6, ws, 64);
        _tile_loadd(7, ws + 256, 64);
        _tile_loadd(4, xs, 64);
        _tile_loadd(5, xs + 256, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(4, xs + 512, 64);
        _tile_loadd(5, xs + 768, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(4, xs + 1024, 64);
        _tile_loadd(5, xs + 1280, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    const long st = ldy * (long)sizeof(float);
    if (mr == MR && nt == NR) {
        _tile_stored(0, y, st);
        _tile_stored(1, y + 16, st);
        _tile_stored(2, y + 16 * ldy, st);
        _tile_stored(3, y + 16 * ldy + 16, st);
        return;
    }
    float tmp[NR][MR] __attribute__((aligned(64)));
    _tile_stored(0, &tmp[0][0], MR * 4);
    _tile_stored(1, &tmp[0][16], MR * 4);
    _tile_stored(2, &tmp[16][0], MR * 4);
    _tile_stored(3, &tmp[16][16], MR * 4);
    for (int t = 0; t < nt; t++) memcpy(y + (long)t * ldy, tmp[t], (size_t)mr * sizeof(float));
}

/* ---- Q8_0 weights ---- */

/* Q8_0 panel [Kp/32][2][16][16] + [32] per k step (= one block): the block's int8 values as
 * bf16 (exact) in the B tiles' layout, then the 32 rows' scales d as fp32 (0 past mr) */
#define PANEL_STEP_Q8 (PANEL_STEP + MR)

TAMX static void amx_pack_w_q8(uint32_t *panel, const void *W, int K, int mr) {
    const unsigned char *w = W;
    const size_t rb = (size_t)K / 32 * QC_Q8_0_BLOCK_BYTES; /* bytes per row */
    for (int b = 0; b < K / 32; b++) {
        uint32_t *dst = panel + (size_t)b * PANEL_STEP_Q8;
        float *d = (float *)(void *)(dst + PANEL_STEP);
        for (int h = 0; h < 2; h++) {
            __m512i r[16];
            for (int n = 0; n < 16; n++) {
                const int row = 16 * h + n;
                if (row >= mr) {
                    r[n] = _mm512_setzero_si512();
                    d[row] = 0.0f;
                    continue;
                }
                const unsigned char *blk = w + (size_t)row * rb + (size_t)b * QC_Q8_0_BLOCK_BYTES;
                uint16_t hd;
                memcpy(&hd, blk, 2);
                d[row] = _cvtsh_ss(hd);
                const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2))));
                const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 18))));
                r[n] = (__m512i)_mm512_cvtne2ps_pbh(q1, q0); /* |q| <= 128: exact */
            }
            tr16(r);
            for (int p = 0; p < 16; p++) _mm512_storeu_si512((void *)(dst + h * 256 + p * 16), r[p]);
        }
    }
}

/* y[t*ldy + r] = sum over the blocks b of d[r][b] * (q[r][b] . (hi + mid + lo)[b][t]): each
 * block's dot products in the tiles, scaled by the rows' d and added in fp32 in block order */
TAMX static void amx_gemm_tile_q8(const uint32_t *panel, const uint32_t *strip, int Kp, float *y,
                                  long ldy, int mr, int nt) {
    float acc[NR][MR] __attribute__((aligned(64)));
    float part[NR][MR] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    for (int s = 0; s < Kp / KSTEP; s++) {
        const uint32_t *ws = panel + (size_t)s * PANEL_STEP_Q8, *xs = strip + (size_t)s * STRIP_STEP;
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        _tile_loadd(6, ws, 64);
        _tile_loadd(7, ws + 256, 64);
        for (int term = 0; term < 3; term++) {
            _tile_loadd(4, xs + 512 * term, 64);
            _tile_loadd(5, xs + 512 * term + 256, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, &part[0][0], MR * 4);
        _tile_stored(1, &part[0][16], MR * 4);
        _tile_stored(2, &part[16][0], MR * 4);
        _tile_stored(3, &part[16][16], MR * 4);
        const float *d = (const float *)(const void *)(ws + PANEL_STEP);
        const __m512 d0 = _mm512_loadu_ps(d), d1 = _mm512_loadu_ps(d + 16);
        for (int t = 0; t < NR; t++) {
            _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_load_ps(part[t]), d0, _mm512_load_ps(acc[t])));
            _mm512_store_ps(acc[t] + 16,
                            _mm512_fmadd_ps(_mm512_load_ps(part[t] + 16), d1, _mm512_load_ps(acc[t] + 16)));
        }
    }
    for (int t = 0; t < nt; t++) memcpy(y + (long)t * ldy, acc[t], (size_t)mr * sizeof(float));
}

/* the probe: iters x (8 tdpbf16ps on four accumulators, operands in tiles), burn_flops an iter */
TAMX static float amx_dot_burn(long iters, float seed) {
    uint32_t a[256] __attribute__((aligned(64)));
    for (int i = 0; i < 256; i++) a[i] = 0x3C003C00u; /* (2^-7, 2^-7) */
    amx_begin();
    float c[256] __attribute__((aligned(64)));
    for (int i = 0; i < 256; i++) c[i] = seed;
    __asm__ volatile("" : : "m"(a), "m"(c) : "memory"); /* the tile loads read them */
    _tile_loadd(0, c, 64); _tile_loadd(1, c, 64); _tile_loadd(2, c, 64); _tile_loadd(3, c, 64);
    _tile_loadd(4, a, 64); _tile_loadd(5, a, 64); _tile_loadd(6, a, 64); _tile_loadd(7, a, 64);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    float acc = 0;
    _tile_stored(0, c, 64); acc += c[0];
    _tile_stored(1, c, 64); acc += c[17];
    _tile_stored(2, c, 64); acc += c[34];
    _tile_stored(3, c, 64); acc += c[51];
    amx_end();
    return acc;
}

/* The two tables differ in the weight type and its packing / tile only: one strip format (3
 * bf16 terms per activation), one tile configuration, one probe. */
#define AMX_TABLE(wdt, packw, tile)                                                            \
    {                                                                                          \
        .name = "AMX", .wdtype = (wdt), .mr = MR, .nr = NR, .kstep = KSTEP, .x_terms = 3,      \
        .pack_w = (packw), .pack_x = amx_pack_x, .gemm_tile = (tile), .begin = amx_begin,      \
        .end = amx_end, .dot_burn = amx_dot_burn, .burn_flops = 8.0 * 16 * 16 * 32 * 2,        \
    }
static const qc_opt_bf16dot amx = AMX_TABLE(QC_BF16, amx_pack_w, amx_gemm_tile);
static const qc_opt_bf16dot amx_q8 = AMX_TABLE(QC_Q8_0, amx_pack_w_q8, amx_gemm_tile_q8);
#undef AMX_TABLE

/* ---- availability ---- */

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe_once(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!qc_opt_cpu_has_bf16dot() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return; /* AMX-BF16, AMX-TILE */
    /* XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS manages the tile state */
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return;
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): Linux >= 5.16 */
    amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
}

int qc_opt_cpu_has_amx(void) {
    pthread_once(&amx_once, amx_probe_once);
    return amx_ok;
}

const qc_opt_bf16dot *qc_opt_amx_pick(void) {
    const qc_opt_kernels *k = qc_opt_kernels_pick(); /* QC_ISA lower than AVX-512: none */
    return qc_opt_cpu_has_amx() && !strcmp(k->isa, "AVX-512") ? &amx : NULL;
}

const qc_opt_bf16dot *qc_opt_amx_q8_pick(void) {
    return qc_opt_amx_pick() ? &amx_q8 : NULL;
}
