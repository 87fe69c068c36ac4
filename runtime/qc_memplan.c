/* qc_memplan.c — memory planning: estimate before allocating, refuse cleanly over a limit.
 * Contract: include/qc/qc_memplan.h. */
#include "qc/qc_memplan.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ===================================================================================== */
/* Checked 64-bit arithmetic                                                             */
/* ===================================================================================== */

/* An accumulator that remembers the first term that overflowed (for the message). */
typedef struct {
    uint64_t sum;         /* running total in the unit of the caller (floats or bytes) */
    const char *overflow; /* name of the first term that overflowed, or NULL */
} acc64;

/* a * b * c * d (any factor may be 1); sets *ovf on overflow. Negative factors count as 0
 * (the caller validated them). */
static uint64_t mul4(int64_t a, int64_t b, int64_t c, int64_t d, int *ovf) {
    uint64_t f[4] = {a > 0 ? (uint64_t)a : 0, b > 0 ? (uint64_t)b : 0,
                     c > 0 ? (uint64_t)c : 0, d > 0 ? (uint64_t)d : 0};
    uint64_t r = 1;
    for (int i = 0; i < 4; i++)
        if (__builtin_mul_overflow(r, f[i], &r)) {
            *ovf = 1;
            return UINT64_MAX;
        }
    return r;
}

/* acc += a*b*c*d, naming the term on overflow. */
static void acc_add(acc64 *acc, const char *term, int64_t a, int64_t b, int64_t c, int64_t d) {
    if (acc->overflow) return;
    int ovf = 0;
    uint64_t v = mul4(a, b, c, d, &ovf);
    if (ovf || __builtin_add_overflow(acc->sum, v, &acc->sum)) acc->overflow = term;
}

static void acc_add_u64(acc64 *acc, const char *term, uint64_t v) {
    if (acc->overflow) return;
    if (__builtin_add_overflow(acc->sum, v, &acc->sum)) acc->overflow = term;
}

/* acc->sum *= k (e.g. floats -> bytes). */
static void acc_scale(acc64 *acc, const char *term, uint64_t k) {
    if (acc->overflow) return;
    if (__builtin_mul_overflow(acc->sum, k, &acc->sum)) acc->overflow = term;
}

double qc_memplan_gib(uint64_t bytes) { return (double)bytes / (double)(1ull << 30); }

/* ===================================================================================== */
/* Config sanity (the estimate must never trust a config it was not given by the loader)  */
/* ===================================================================================== */

qc_status qc_memplan_check_config(const qc_config *c, qc_err *err) {
    if (!c) return qc_errf(err, QC_ERR_ARG, "memory plan: no config");
    if (c->n_layers < 0 || c->n_layers > QC_MAX_LAYERS)
        return qc_errf(err, QC_ERR_ARG, "memory plan: n_layers %d outside [0, %d]", c->n_layers,
                       QC_MAX_LAYERS);
    const int v[] = {c->vocab_size,    c->hidden_size,   c->intermediate_size, c->n_heads,
                     c->n_kv_heads,    c->head_dim,      c->lin_n_k_heads,     c->lin_n_v_heads,
                     c->lin_k_dim,     c->lin_v_dim,     c->conv_kernel,       c->rotary_dim,
                     c->n_experts,     c->n_experts_per_tok, c->moe_intermediate_size,
                     c->shared_expert_intermediate_size};
    const char *nm[] = {"vocab_size",    "hidden_size",   "intermediate_size", "n_heads",
                        "n_kv_heads",    "head_dim",      "lin_n_k_heads",     "lin_n_v_heads",
                        "lin_k_dim",     "lin_v_dim",     "conv_kernel",       "rotary_dim",
                        "n_experts",     "n_experts_per_tok", "moe_intermediate_size",
                        "shared_expert_intermediate_size"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] < 0 || v[i] > (1 << 24)) /* keeps every product of two dims below 2^48 */
            return qc_errf(err, QC_ERR_RANGE, "memory plan: %s %d outside [0, 2^24]", nm[i],
                           v[i]);
    /* the derived row counts are ints everywhere (qc_cfg_conv_dim, the tensors' rows): keep
     * them, doubled, well inside int (what the config parser accepts is) */
    const int64_t key = (int64_t)c->lin_n_k_heads * c->lin_k_dim;
    const int64_t val = (int64_t)c->lin_n_v_heads * c->lin_v_dim;
    const int64_t qrows = 2 * (int64_t)c->n_heads * c->head_dim;
    const int64_t kvrows = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t lim = (int64_t)1 << 30;
    if (2 * key + val >= lim || qrows >= lim || kvrows >= lim)
        return qc_errf(err, QC_ERR_RANGE,
                       "memory plan: derived sizes outside [0, 2^30) (conv dim %lld, q_proj rows "
                       "%lld, k/v rows %lld)",
                       (long long)(2 * key + val), (long long)qrows, (long long)kvrows);
    return QC_OK;
}

/* ===================================================================================== */
/* Weights                                                                               */
/* ===================================================================================== */

/* Elements of the weights stored in the weight dtype: the 2-D projection matrices of the dense
 * layers and an untied lm_head (proj: what a Q8_0 model quantizes, qc_model_synth.c) and the
 * rest (wide: embedding, norms, conv, MoE tensors), and of those always stored as F32 (A_log,
 * gated-norm weight). active: only what one decode token reads — the [V, H] matrix once (the
 * lm_head; the embedding row is a gather), and of a MoE layer's routed experts only k of E. */
static void weight_elems(const qc_config *c, acc64 *proj, acc64 *wide, acc64 *f32, int active) {
    const int64_t V = c->vocab_size, H = c->hidden_size, I = c->intermediate_size;
    const int64_t nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    const int64_t nk = c->lin_n_k_heads, nv = c->lin_n_v_heads, dk = c->lin_k_dim,
                  dv = c->lin_v_dim, K = c->conv_kernel;
    const int64_t C = 2 * nk * dk + nv * dv; /* each factor <= INT_MAX: fits in int64 */
    const int64_t E = c->n_experts, k = c->n_experts_per_tok, Ie = c->moe_intermediate_size,
                  Is = c->shared_expert_intermediate_size;
    if (c->tie_word_embeddings || !active) acc_add(wide, "embed_tokens", V, H, 1, 1);
    if (!c->tie_word_embeddings) acc_add(proj, "lm_head", V, H, 1, 1);
    acc_add(wide, "norm", H, 1, 1, 1);
    for (int l = 0; l < c->n_layers; l++) {
        acc_add(wide, "input_layernorm", 2, H, 1, 1); /* + post_attention_layernorm */
        if (qc_cfg_is_moe(c)) {
            acc_add(wide, "mlp.gate (router)", E, H, 1, 1);
            acc_add(wide, "mlp.experts", active ? k : E, 3, Ie, H); /* gate_up + down */
            acc_add(wide, "mlp.shared_expert", 3, Is, H, 1);
            acc_add(wide, "mlp.shared_expert_gate", H, 1, 1, 1);
        } else {
            acc_add(proj, "mlp", 3, I, H, 1);
        }
        if (c->layer_types[l] == QC_LAYER_FULL) {
            acc_add(proj, "q_proj", 2, nh, hd, H);
            acc_add(proj, "k_proj", 2, nkv, hd, H); /* + v_proj */
            acc_add(proj, "o_proj", H, nh, hd, 1);
            acc_add(wide, "q_norm", 2, hd, 1, 1);   /* + k_norm */
        } else {
            acc_add(proj, "in_proj_qkv", C, H, 1, 1);
            acc_add(proj, "in_proj_z", nv, dv, H, 1);
            acc_add(proj, "in_proj_b", 2, nv, H, 1); /* + in_proj_a */
            acc_add(wide, "conv1d", C, K, 1, 1);
            acc_add(wide, "dt_bias", nv, 1, 1, 1);
            acc_add(proj, "out_proj", H, nv, dv, 1);
            acc_add(f32, "A_log", nv, 1, 1, 1);
            acc_add(f32, "linear_attn.norm", dv, 1, 1, 1);
        }
    }
}

static qc_status weight_bytes(const qc_config *cfg, qc_dtype dtype, int active, uint64_t *bytes,
                              qc_err *err) {
    *bytes = 0;
    qc_status st = qc_memplan_check_config(cfg, err);
    if (st) return st;
    acc64 proj = {0, NULL}, wide = {0, NULL}, f32 = {0, NULL};
    weight_elems(cfg, &proj, &wide, &f32, active);
    if (dtype == QC_Q8_0) { /* 34 bytes a block of 32 (the rows are multiples of 32); the rest
                               BF16, as qc_model_synth.c stores it */
        acc_scale(&proj, "weights (bytes)", QC_Q8_0_BLOCK_BYTES);
        if (!proj.overflow) proj.sum = (proj.sum + QC_Q8_0_BLOCK - 1) / QC_Q8_0_BLOCK;
        acc_scale(&wide, "weights (bytes)", qc_dtype_size(QC_BF16));
    } else {
        acc_scale(&proj, "weights (bytes)", qc_dtype_size(dtype));
        acc_scale(&wide, "weights (bytes)", qc_dtype_size(dtype));
    }
    acc_scale(&f32, "weights (bytes)", 4);
    acc_add_u64(&wide, "weights (total)", f32.sum);
    acc_add_u64(&wide, "weights (total)", proj.sum);
    const char *bad = wide.overflow ? wide.overflow : f32.overflow ? f32.overflow : proj.overflow;
    if (bad)
        return qc_errf(err, QC_ERR_RANGE, "memory plan: weights: %s size overflows 64 bits", bad);
    *bytes = wide.sum;
    return QC_OK;
}

qc_status qc_memplan_weight_bytes(const qc_config *cfg, qc_dtype dtype, uint64_t *bytes,
                                  qc_err *err) {
    return weight_bytes(cfg, dtype, 0, bytes, err);
}

qc_status qc_memplan_active_weight_bytes(const qc_config *cfg, qc_dtype dtype, uint64_t *bytes,
                                         qc_err *err) {
    return weight_bytes(cfg, dtype, 1, bytes, err);
}

/* ===================================================================================== */
/* Backend, state, runner                                                                */
/* ===================================================================================== */

/* Bytes of one qc_state (the formula of qc_state_bytes, overflow-checked). */
static void state_bytes(const qc_config *c, int64_t ctx, acc64 *a) {
    const int64_t C = 2 * (int64_t)c->lin_n_k_heads * c->lin_k_dim +
                      (int64_t)c->lin_n_v_heads * c->lin_v_dim;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_types[l] == QC_LAYER_FULL)
            acc_add(a, "state k/v caches", 2 * (int64_t)c->n_kv_heads, ctx, c->head_dim, 4);
        else {
            acc_add(a, "state conv", C, c->conv_kernel, 4, 1);
            acc_add(a, "state recurrent", c->lin_n_v_heads, c->lin_k_dim, c->lin_v_dim, 4);
        }
    }
    acc_add(a, "state pointers", 4, c->n_layers, (int64_t)sizeof(float *), 1);
}

void qc_memplan_req_init(qc_memplan_req *rq, const qc_config *cfg, qc_dtype weight_dtype,
                         int max_context_len, int max_tokens) {
    memset(rq, 0, sizeof *rq);
    rq->cfg = cfg;
    rq->weight_dtype = weight_dtype;
    rq->n_backends = 0;
    rq->max_context_len = max_context_len;
    rq->max_tokens = max_tokens;
    rq->n_threads = 0;
    rq->chunk_size = 64;
}

void qc_memplan_req_set_opts(qc_memplan_req *rq, const qc_backend_opts *o) {
    qc_backend_opts d;
    if (!o) {
        qc_backend_opts_default(&d);
        o = &d;
    }
    rq->max_tokens = o->max_tokens;
    rq->n_threads = o->n_threads;
    rq->chunk_size = o->chunk_size;
}

qc_status qc_memplan_add_backend(qc_memplan_req *rq, const char *what, uint64_t bytes,
                                 qc_err *err) {
    if (!what) what = "backend";
    if (rq->n_backends < 0 || rq->n_backends >= QC_MEMPLAN_MAX_BACKENDS)
        return qc_errf(err, QC_ERR_ARG, "memory plan: %s: more than %d backends at once", what,
                       QC_MEMPLAN_MAX_BACKENDS);
    if (bytes == UINT64_MAX || bytes == (uint64_t)SIZE_MAX)
        return qc_errf(err, QC_ERR_RANGE,
                       "memory plan: %s: its memory for max_tokens %d overflows 64 bits (or the "
                       "config is not plannable)",
                       what, rq->max_tokens);
    rq->backend_bytes[rq->n_backends++] = bytes;
    return QC_OK;
}

qc_status qc_memplan_estimate(const qc_memplan_req *rq, qc_memplan *out, qc_err *err) {
    memset(out, 0, sizeof *out);
    if (!rq) return qc_errf(err, QC_ERR_ARG, "memory plan: no request");
    qc_status st = qc_memplan_check_config(rq->cfg, err);
    if (st) return st;
    const qc_config *c = rq->cfg;
    if (rq->max_context_len < 1 || rq->max_tokens < 1)
        return qc_errf(err, QC_ERR_ARG, "memory plan: max_context_len %d / max_tokens %d < 1",
                       rq->max_context_len, rq->max_tokens);
    if (rq->n_logit_rows < 0 || rq->n_hidden_tokens < 0 || rq->n_state_copies < 0)
        return qc_errf(err, QC_ERR_ARG, "memory plan: negative row / copy count");
    if (rq->n_backends < 0 || rq->n_backends > QC_MEMPLAN_MAX_BACKENDS)
        return qc_errf(err, QC_ERR_ARG, "memory plan: %d backends outside [0, %d]",
                       rq->n_backends, QC_MEMPLAN_MAX_BACKENDS);

    /* weights */
    uint64_t wbytes = rq->weight_bytes, wactive = 0;
    if (!wbytes && (st = qc_memplan_weight_bytes(c, rq->weight_dtype, &wbytes, err))) return st;
    if (qc_cfg_is_moe(c) &&
        (st = qc_memplan_active_weight_bytes(c, rq->weight_dtype, &wactive, err)))
        return st;

    /* backend(s): what each reported (the planner never re-derives a backend's layout) */
    acc64 be = {0, NULL};
    for (int i = 0; i < rq->n_backends; i++) acc_add_u64(&be, "backend", rq->backend_bytes[i]);

    /* state */
    acc64 sa = {0, NULL};
    state_bytes(c, rq->max_context_len, &sa);

    /* runner / caller */
    acc64 ru = {0, NULL};
    acc_add(&ru, "logits rows", rq->n_logit_rows, c->vocab_size, 4, 1);
    acc_add(&ru, "runner last logits", c->vocab_size, 4, 1, 1);
    acc_add(&ru, "runner token history", rq->max_context_len, 4, 1, 1);
    if (rq->nokv) acc_add(&ru, "no-KV recomputation logits", rq->max_context_len, c->vocab_size, 4, 1);
    acc_add(&ru, "hidden captures", (int64_t)c->n_layers + 1, rq->n_hidden_tokens,
            c->hidden_size, 4);
    acc_add_u64(&ru, "caller's extra bytes", rq->extra_bytes);
    /* state copies: n x one state */
    if (rq->n_state_copies > 0 && !sa.overflow) {
        acc64 cp = {sa.sum, NULL};
        acc_scale(&cp, "state copies", (uint64_t)rq->n_state_copies);
        if (cp.overflow) ru.overflow = ru.overflow ? ru.overflow : cp.overflow;
        else acc_add_u64(&ru, "state copies", cp.sum);
    }

    const char *bad = be.overflow ? be.overflow : sa.overflow ? sa.overflow : ru.overflow;
    if (bad)
        return qc_errf(err, QC_ERR_RANGE,
                       "memory plan: %s size overflows 64 bits (max_context_len %d, max_tokens "
                       "%d, vocab %d)",
                       bad, rq->max_context_len, rq->max_tokens, c->vocab_size);
    acc64 tot = {0, NULL};
    acc_add_u64(&tot, "total", wbytes);
    acc_add_u64(&tot, "total", be.sum);
    acc_add_u64(&tot, "total", sa.sum);
    acc_add_u64(&tot, "total", ru.sum);
    acc_add_u64(&tot, "total", QC_MEMPLAN_OVERHEAD);
    if (tot.overflow) return qc_errf(err, QC_ERR_RANGE, "memory plan: total overflows 64 bits");
    out->weights = wbytes;
    out->weights_active = wactive;
    out->backend = be.sum;
    out->state = sa.sum;
    out->runner = ru.sum;
    out->overhead = QC_MEMPLAN_OVERHEAD;
    out->total = tot.sum;
    return QC_OK;
}

const char *qc_memplan_str(const qc_memplan *p, char *buf, size_t n) {
    int w = snprintf(buf, n,
                     "weights %.2f GiB + backend %.2f GiB + state %.2f GiB + runner %.2f GiB + "
                     "overhead %.2f GiB = %.2f GiB",
                     qc_memplan_gib(p->weights), qc_memplan_gib(p->backend),
                     qc_memplan_gib(p->state), qc_memplan_gib(p->runner),
                     qc_memplan_gib(p->overhead), qc_memplan_gib(p->total));
    if (p->weights_active && w >= 0 && (size_t)w < n) /* MoE: what a decode token reads */
        snprintf(buf + w, n - (size_t)w, " (MoE: %.2f GiB of the weights active per token)",
                 qc_memplan_gib(p->weights_active));
    return buf;
}

/* ===================================================================================== */
/* Sizes and limits                                                                      */
/* ===================================================================================== */

qc_status qc_memplan_parse_size(const char *s, const char *what, uint64_t *bytes, qc_err *err) {
    *bytes = 0;
    if (!what) what = "size";
    if (!s) return qc_errf(err, QC_ERR_ARG, "%s: missing size", what);
    const char *p = s;
    uint64_t ip = 0;
    int ndig = 0;
    while (isdigit((unsigned char)*p)) {
        if (__builtin_mul_overflow(ip, 10, &ip) ||
            __builtin_add_overflow(ip, (uint64_t)(*p - '0'), &ip))
            return qc_errf(err, QC_ERR_ARG, "%s: '%s' is too large", what, s);
        p++, ndig++;
    }
    /* fraction: up to 9 digits kept as numerator / 10^k */
    uint64_t frac = 0, fden = 1;
    if (*p == '.') {
        p++;
        int nf = 0;
        while (isdigit((unsigned char)*p)) {
            if (nf < 9) frac = frac * 10 + (uint64_t)(*p - '0'), fden *= 10;
            p++, nf++, ndig++;
        }
        if (!nf) ndig = 0;
    }
    if (!ndig) return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not a size (e.g. 8G, 512M)", what, s);
    int shift = 0;
    switch (tolower((unsigned char)*p)) {
    case 'k': shift = 10, p++; break;
    case 'm': shift = 20, p++; break;
    case 'g': shift = 30, p++; break;
    case 't': shift = 40, p++; break;
    default: break;
    }
    if (shift && tolower((unsigned char)p[0]) == 'i' && tolower((unsigned char)p[1]) == 'b') p += 2;
    else if (tolower((unsigned char)*p) == 'b') p++;
    if (*p) return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not a size (e.g. 8G, 512M)", what, s);
    uint64_t mult = (uint64_t)1 << shift, v, fv;
    if (__builtin_mul_overflow(ip, mult, &v))
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is too large", what, s);
    /* frac * mult / fden without overflow: frac < 10^9 < 2^30, mult <= 2^40 */
    fv = (uint64_t)((long double)frac * (long double)mult / (long double)fden);
    if (__builtin_add_overflow(v, fv, &v) || v >= ((uint64_t)1 << 63))
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is too large", what, s);
    if (v == 0) return qc_errf(err, QC_ERR_ARG, "%s: '%s' is zero", what, s);
    *bytes = v;
    return QC_OK;
}

qc_status qc_memplan_parse_meminfo(const char *text, uint64_t *bytes, qc_err *err) {
    *bytes = 0;
    const char *p = text ? strstr(text, "MemAvailable:") : NULL;
    /* must be at the start of a line */
    while (p && p != text && p[-1] != '\n') p = strstr(p + 1, "MemAvailable:");
    if (!p) return qc_errf(err, QC_ERR_FORMAT, "/proc/meminfo: MemAvailable: missing");
    p += strlen("MemAvailable:");
    while (*p == ' ' || *p == '\t') p++;
    if (!isdigit((unsigned char)*p))
        return qc_errf(err, QC_ERR_FORMAT, "/proc/meminfo: MemAvailable: not a number");
    uint64_t kb = 0;
    while (isdigit((unsigned char)*p)) {
        if (__builtin_mul_overflow(kb, 10, &kb) ||
            __builtin_add_overflow(kb, (uint64_t)(*p - '0'), &kb))
            return qc_errf(err, QC_ERR_FORMAT, "/proc/meminfo: MemAvailable: too large");
        p++;
    }
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, "kB", 2) != 0)
        return qc_errf(err, QC_ERR_FORMAT, "/proc/meminfo: MemAvailable: unit is not kB");
    if (__builtin_mul_overflow(kb, 1024, bytes))
        return qc_errf(err, QC_ERR_FORMAT, "/proc/meminfo: MemAvailable: too large");
    return QC_OK;
}

/* Read a small text file into buf (NUL-terminated). 0 on success. */
static int read_small(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = '\0';
    return 0;
}

/* A decimal number file ("max" / unreadable -> 0 = no limit). */
static uint64_t read_u64_file(const char *path) {
    char buf[64];
    if (read_small(path, buf, sizeof buf) != 0) return 0;
    if (!isdigit((unsigned char)buf[0])) return 0;
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    return errno ? 0 : (uint64_t)v;
}

/* Room left under this process's cgroup memory limit, or 0 when no limit applies. */
static uint64_t cgroup_room(void) {
    /* cgroup v2: the process's group from /proc/self/cgroup ("0::/path") */
    char cg[4096], path[4200];
    const char *rel = "";
    if (read_small("/proc/self/cgroup", cg, sizeof cg) == 0) {
        char *l = strstr(cg, "0::");
        if (l) {
            rel = l + 3;
            char *nl = strchr(l, '\n');
            if (nl) *nl = '\0';
        }
    }
    const char *dirs[2] = {rel, ""};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", dirs[i]);
        uint64_t max = read_u64_file(path);
        if (max) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", dirs[i]);
            uint64_t cur = read_u64_file(path);
            return max > cur ? max - cur : 1;
        }
    }
    /* cgroup v1 */
    uint64_t max = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (max && max < ((uint64_t)1 << 60)) {
        uint64_t cur = read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
        return max > cur ? max - cur : 1;
    }
    return 0;
}

qc_status qc_memplan_available(uint64_t *bytes, qc_err *err) {
    char buf[8192];
    *bytes = 0;
    if (read_small("/proc/meminfo", buf, sizeof buf) != 0)
        return qc_errf(err, QC_ERR_IO, "/proc/meminfo: cannot read: %s (pass --max-memory)",
                       strerror(errno));
    qc_status st = qc_memplan_parse_meminfo(buf, bytes, err);
    if (st) return st;
    uint64_t room = cgroup_room();
    if (room && room < *bytes) *bytes = room;
    return QC_OK;
}

qc_status qc_memplan_limit(const char *max_memory, uint64_t *limit, qc_err *err) {
    if (max_memory) return qc_memplan_parse_size(max_memory, "--max-memory", limit, err);
    return qc_memplan_available(limit, err);
}

qc_status qc_memplan_check(uint64_t bytes_needed, uint64_t limit, const char *what,
                           qc_err *err) {
    if (bytes_needed <= limit) return QC_OK;
    return qc_errf(err, QC_ERR_OOM, "%s: needs %.2f GiB > limit %.2f GiB (--max-memory)",
                   what ? what : "run", qc_memplan_gib(bytes_needed), qc_memplan_gib(limit));
}

qc_status qc_memplan_enforce(const qc_memplan_req *rq, const char *max_memory, const char *what,
                             qc_memplan *plan, qc_err *err) {
    qc_memplan p;
    qc_status st = qc_memplan_estimate(rq, &p, err);
    if (plan) *plan = p;
    if (st) return st;
    uint64_t limit;
    if ((st = qc_memplan_limit(max_memory, &limit, err))) return st;
    if ((st = qc_memplan_check(p.total, limit, what, err))) {
        char line[256];
        size_t used = strlen(err ? err->msg : "");
        if (err && used + 4 < sizeof err->msg)
            snprintf(err->msg + used, sizeof err->msg - used, ": %s",
                     qc_memplan_str(&p, line, sizeof line));
    }
    return st;
}

/* ===================================================================================== */
/* Peak RSS                                                                              */
/* ===================================================================================== */

uint64_t qc_memplan_peak_rss(void) {
    char buf[8192];
    if (read_small("/proc/self/status", buf, sizeof buf) != 0) return 0;
    const char *p = strstr(buf, "VmHWM:");
    if (!p) return 0;
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    unsigned long long kb = strtoull(p, NULL, 10);
    return (uint64_t)kb * 1024;
}
