/* qc_sha256.c — SHA-256 (FIPS 180-4): portable C plus an x86 SHA-NI block function. */
#include "qc/qc_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define QC_SHA_HAVE_X86 1
#endif

/* ==== Constants ==== */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

/* ==== Portable block function ==== */

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void blocks_c(uint32_t h[8], const uint8_t *p, size_t nblocks) {
    for (; nblocks--; p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
                   (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t S1 = ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25);
            uint32_t ch = (e & f) ^ (~e & g);
            uint32_t t1 = k + S1 + ch + K256[i] + w[i];
            uint32_t S0 = ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22);
            uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
            uint32_t t2 = S0 + mj;
            k = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    }
}

/* ==== x86 SHA-NI block function (Intel's published instruction sequence) ==== */

#ifdef QC_SHA_HAVE_X86
__attribute__((target("sha,sse4.1"))) static void blocks_ni(uint32_t h[8], const uint8_t *p,
                                                             size_t nblocks) {
    const __m128i MASK = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i st1 = _mm_loadu_si128((const __m128i *)&h[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);          /* CDAB */
    st1 = _mm_shuffle_epi32(st1, 0x1B);          /* EFGH */
    __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);  /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xF0);       /* CDGH */
    for (; nblocks--; p += 64) {
        __m128i abef = st0, cdgh = st1, msg, m0, m1, m2, m3, t;
        m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 0)), MASK);
        m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), MASK);
        m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 32)), MASK);
        m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 48)), MASK);
#define KV(i) _mm_loadu_si128((const __m128i *)&K256[i])
#define RND4(mi, i)                                          \
    msg = _mm_add_epi32(mi, KV(i));                          \
    st1 = _mm_sha256rnds2_epu32(st1, st0, msg);              \
    msg = _mm_shuffle_epi32(msg, 0x0E);                      \
    st0 = _mm_sha256rnds2_epu32(st0, st1, msg);
        /* rounds 0-15 */
        RND4(m0, 0);
        RND4(m1, 4);
        m0 = _mm_sha256msg1_epu32(m0, m1);
        RND4(m2, 8);
        m1 = _mm_sha256msg1_epu32(m1, m2);
        RND4(m3, 12);
        t = _mm_alignr_epi8(m3, m2, 4);
        m0 = _mm_add_epi32(m0, t);
        m0 = _mm_sha256msg2_epu32(m0, m3);
        m2 = _mm_sha256msg1_epu32(m2, m3);
        /* rounds 16-51: a rotating schedule over m0..m3 */
#define STEP(ma, mb, mc, md, i)                  \
    RND4(ma, i);                                 \
    t = _mm_alignr_epi8(ma, md, 4);              \
    mb = _mm_add_epi32(mb, t);                   \
    mb = _mm_sha256msg2_epu32(mb, ma);           \
    md = _mm_sha256msg1_epu32(md, ma);
        STEP(m0, m1, m2, m3, 16);
        STEP(m1, m2, m3, m0, 20);
        STEP(m2, m3, m0, m1, 24);
        STEP(m3, m0, m1, m2, 28);
        STEP(m0, m1, m2, m3, 32);
        STEP(m1, m2, m3, m0, 36);
        STEP(m2, m3, m0, m1, 40);
        STEP(m3, m0, m1, m2, 44);
        STEP(m0, m1, m2, m3, 48);
        /* rounds 52-63 */
        RND4(m1, 52);
        t = _mm_alignr_epi8(m1, m0, 4);
        m2 = _mm_add_epi32(m2, t);
        m2 = _mm_sha256msg2_epu32(m2, m1);
        RND4(m2, 56);
        t = _mm_alignr_epi8(m2, m1, 4);
        m3 = _mm_add_epi32(m3, t);
        m3 = _mm_sha256msg2_epu32(m3, m2);
        RND4(m3, 60);
#undef STEP
#undef RND4
#undef KV
        st0 = _mm_add_epi32(st0, abef);
        st1 = _mm_add_epi32(st1, cdgh);
    }
    tmp = _mm_shuffle_epi32(st0, 0x1B);         /* FEBA */
    st1 = _mm_shuffle_epi32(st1, 0xB1);         /* DCHG */
    st0 = _mm_blend_epi16(tmp, st1, 0xF0);      /* DCBA */
    st1 = _mm_alignr_epi8(st1, tmp, 8);         /* ABEF -> HGFE */
    _mm_storeu_si128((__m128i *)&h[0], st0);
    _mm_storeu_si128((__m128i *)&h[4], st1);
}

static int cpu_has_sha_ni(void) {
    static int cached = -1;
    if (cached < 0) {
        unsigned a, b, c, d;
        int ok = 0;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29))) {
            unsigned a1, b1, c1, d1;
            if (__get_cpuid(1, &a1, &b1, &c1, &d1) && (c1 & (1u << 19)) && (c1 & (1u << 9)))
                ok = 1; /* SSE4.1 and SSSE3 too */
        }
        cached = ok;
    }
    return cached;
}
#endif

/* Set QC_SHA256_PORTABLE=1 in the environment to force the C path (tests compare both). */
static void blocks(uint32_t h[8], const uint8_t *p, size_t nblocks) {
#ifdef QC_SHA_HAVE_X86
    const char *e = getenv("QC_SHA256_PORTABLE"); /* read per call so tests can flip it */
    int force_c = (e && e[0] == '1');
    if (!force_c && cpu_has_sha_ni()) {
        blocks_ni(h, p, nblocks);
        return;
    }
#endif
    blocks_c(h, p, nblocks);
}

int qc_sha256_accelerated(void) {
#ifdef QC_SHA_HAVE_X86
    const char *e = getenv("QC_SHA256_PORTABLE");
    return !(e && e[0] == '1') && cpu_has_sha_ni();
#else
    return 0;
#endif
}

/* ==== Streaming API ==== */

void qc_sha256_init(qc_sha256_ctx *c) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, H0, sizeof H0);
    c->nbytes = 0;
    c->buflen = 0;
}

void qc_sha256_update(qc_sha256_ctx *c, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    c->nbytes += len;
    if (c->buflen) {
        size_t take = 64 - c->buflen;
        if (take > len) take = len;
        memcpy(c->buf + c->buflen, p, take);
        c->buflen += take;
        p += take;
        len -= take;
        if (c->buflen < 64) return;
        blocks(c->h, c->buf, 1);
        c->buflen = 0;
    }
    if (len >= 64) {
        size_t nb = len / 64;
        blocks(c->h, p, nb);
        p += nb * 64;
        len -= nb * 64;
    }
    if (len) {
        memcpy(c->buf, p, len);
        c->buflen = len;
    }
}

void qc_sha256_final(qc_sha256_ctx *c, uint8_t digest[32]) {
    uint64_t bits = c->nbytes * 8;
    uint8_t pad[72];
    size_t padlen = (c->buflen < 56) ? 56 - c->buflen : 120 - c->buflen;
    memset(pad, 0, sizeof pad);
    pad[0] = 0x80;
    qc_sha256_update(c, pad, padlen);
    uint8_t lenbe[8];
    for (int i = 0; i < 8; i++) lenbe[i] = (uint8_t)(bits >> (56 - 8 * i));
    qc_sha256_update(c, lenbe, 8);
    for (int i = 0; i < 8; i++) {
        digest[4 * i] = (uint8_t)(c->h[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        digest[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void qc_sha256_to_hex(const uint8_t digest[32], char hex[65]) {
    static const char *X = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = X[digest[i] >> 4];
        hex[2 * i + 1] = X[digest[i] & 15];
    }
    hex[64] = '\0';
}

/* ==== One-shot helpers ==== */

void qc_sha256_buf_hex(const void *data, size_t len, char hex[65]) {
    qc_sha256_ctx c;
    uint8_t d[32];
    qc_sha256_init(&c);
    qc_sha256_update(&c, data, len);
    qc_sha256_final(&c, d);
    qc_sha256_to_hex(d, hex);
}

qc_status qc_sha256_file_hex(const char *path, char hex[65], qc_err *err) {
    /* open without blocking (a FIFO), then refuse anything but a regular file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    qc_sha256_ctx c;
    qc_sha256_init(&c);
    static const size_t BUFSZ = 1 << 16;
    uint8_t *buf = malloc(BUFSZ);
    if (!buf) {
        fclose(f);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    }
    size_t n;
    while ((n = fread(buf, 1, BUFSZ, f)) > 0) qc_sha256_update(&c, buf, n);
    int bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad) return qc_errf(err, QC_ERR_IO, "%s: read error", path);
    uint8_t d[32];
    qc_sha256_final(&c, d);
    qc_sha256_to_hex(d, hex);
    return QC_OK;
}
