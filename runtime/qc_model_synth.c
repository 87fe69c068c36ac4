/* qc_model_synth.c — qc_model_synthetic: a model of any config with seeded random weights in
 * memory (bench, record --synthetic, tests), validated by the one model check.
 *
 * Every tensor of the config's layer kinds (the dense MLP, or for a mixture-of-experts config
 * the router, fused routed experts and shared expert of qc_model_moe.c) is stored as the
 * requested dtype except A_log and the gated-norm weight (F32, as real checkpoints). Scales:
 * projections 1/sqrt(fan_in), zero-centred norm weights near 0, gated-norm weight near 1,
 * DeltaNet decays spread from fast to slow. The values depend on (seed, tensor order) only, not
 * on the thread count. Q8_0: the 2-D projection matrices of the dense layers and an untied
 * lm_head are Q8_0 (each block of 32 generated values quantized as the golden generator does:
 * d = f16(max|x| / 127), q = clamp(round(x / d), -127, 127)), every other tensor BF16 (F32 as
 * above), as a Q8_0 checkpoint keeps them float.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_model.h"
#include "qc_model_priv.h"

/* ==== Synthetic model ==== */

/* Random numbers: splitmix64 per block of SYN_BLOCK elements, seeded from (seed, tensor id,
 * block), so the result does not depend on the thread count. Normals are approximated by
 * Irwin-Hall sums of four 16-bit uniforms (mean 0, std 1, support +-3.46): cheap and bounded. */
#define SYN_BLOCK 65536

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline float approx_normal(uint64_t r) {
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                 (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return ((float)s - 131070.0f) * (1.0f / 37837.23f);
}

typedef enum { G_NORMAL = 0, G_ALOG = 1 } gen_kind;

typedef struct {
    qc_tensor *dst;   /* view to fill (data set once the arena exists) */
    size_t numel;     /* elements */
    size_t offset;    /* byte offset in the arena */
    float mean, std;  /* value = mean + std * normal */
    gen_kind kind;    /* G_ALOG: log of decays spread over [0.05, 8] */
    uint64_t id;      /* tensor id for seeding */
} gen_job;

/* f32 -> bf16 round-to-nearest-even, inlined for the generator (values are finite here). */
static inline uint16_t bf16_rne_finite(float v) {
    uint32_t x;
    memcpy(&x, &v, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static void gen_block(const gen_job *j, size_t blk, uint64_t seed) {
    uint64_t s = seed ^ (0xd1b54a32d192ed03ULL * (j->id + 1));
    uint64_t s2 = splitmix64(&s) ^ (blk * 0x9e3779b97f4a7c15ULL);
    uint64_t st = splitmix64(&s2);
    size_t i0 = blk * SYN_BLOCK, i1 = i0 + SYN_BLOCK;
    if (i1 > j->numel) i1 = j->numel;
    uint8_t *base = (uint8_t *)j->dst->data;
    const float mean = j->mean, sd = j->std;
    if (j->kind == G_ALOG) {
        /* head i of n: A = exp(lerp(ln 0.05, ln 8, (i + u) / n)), u uniform in [0,1) */
        for (size_t i = i0; i < i1; i++) {
            double u = (double)(splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
            double t = ((double)i + u) / (double)j->numel;
            float v = (float)(log(0.05) + (log(8.0) - log(0.05)) * t);
            QC_ASSERT(j->dst->dtype == QC_F32);
            memcpy(base + 4 * i, &v, 4);
        }
        return;
    }
    switch (j->dst->dtype) {
    case QC_F32: {
        float *o = (float *)(void *)base; /* arena offsets are 64-byte aligned */
        for (size_t i = i0; i < i1; i++) o[i] = mean + sd * approx_normal(splitmix64(&st));
    } break;
    case QC_BF16: {
        uint16_t *o = (uint16_t *)(void *)base;
        for (size_t i = i0; i < i1; i++) o[i] = bf16_rne_finite(mean + sd * approx_normal(splitmix64(&st)));
    } break;
    case QC_F16: {
        uint16_t *o = (uint16_t *)(void *)base;
        for (size_t i = i0; i < i1; i++) o[i] = qc_f32_to_f16(mean + sd * approx_normal(splitmix64(&st)));
    } break;
    case QC_Q8_0: /* i0 % 32 == 0 (SYN_BLOCK is a multiple of 32) and numel % 32 == 0 */
        for (size_t b0 = i0; b0 < i1; b0 += QC_Q8_0_BLOCK) {
            float v[QC_Q8_0_BLOCK];
            for (int i = 0; i < QC_Q8_0_BLOCK; i++) v[i] = mean + sd * approx_normal(splitmix64(&st));
            qc_q8_0_quantize_block(v, base + b0 / QC_Q8_0_BLOCK * QC_Q8_0_BLOCK_BYTES);
        }
        break;
    case QC_I8: break;
    }
}

void qc_q8_0_quantize_block(const float *v, unsigned char *blk) {
    float amax = 0.0f;
    for (int i = 0; i < QC_Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(v[i]));
    const uint16_t dh = qc_f32_to_f16(amax / 127.0f);
    const float d = qc_f16_to_f32(dh);
    memcpy(blk, &dh, 2);
    for (int i = 0; i < QC_Q8_0_BLOCK; i++) {
        float q = d > 0.0f ? nearbyintf(v[i] / d) : 0.0f;
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
        blk[2 + i] = (unsigned char)(int8_t)q;
    }
}

static qc_status check_synth_cfg(const qc_config *c, qc_err *err) {
    if (c->n_layers < 1 || c->n_layers > QC_MAX_LAYERS || c->vocab_size < 1 || c->hidden_size < 1 ||
        (!qc_cfg_is_moe(c) && c->intermediate_size < 1) || c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 1 ||
        c->lin_n_k_heads < 1 || c->lin_n_v_heads < 1 || c->lin_k_dim < 1 || c->lin_v_dim < 1 ||
        c->conv_kernel < 1)
        return qc_errf(err, QC_ERR_ARG, "synthetic model: config has a non-positive size");
    if (c->lin_n_v_heads % c->lin_n_k_heads || c->n_heads % c->n_kv_heads)
        return qc_errf(err, QC_ERR_ARG, "synthetic model: head counts are not multiples");
    qc_err e2;
    if (qc_moe_check_geometry(c, &e2))
        return qc_errf(err, QC_ERR_ARG, "synthetic model: %s", e2.msg + strlen("model: "));
    return QC_OK;
}

qc_status qc_model_synthetic(const qc_config *cfg, qc_dtype dtype, uint64_t seed, qc_model **out,
                             qc_err *err) {
    QC_ASSERT(cfg && out);
    *out = NULL;
    qc_status st = check_synth_cfg(cfg, err);
    if (st) return st;
    if (dtype != QC_F32 && dtype != QC_BF16 && dtype != QC_F16 && dtype != QC_Q8_0)
        return qc_errf(err, QC_ERR_ARG, "synthetic model: bad dtype %d", (int)dtype);
    const qc_dtype pdt = dtype, odt = dtype == QC_Q8_0 ? QC_BF16 : dtype; /* projections, rest */
    qc_model *m = qc_model_new(cfg);
    if (!m) return qc_errf(err, QC_ERR_OOM, "synthetic model: out of memory");
    const qc_config *c = &m->cfg;
    int njobs_max = 3 + c->n_layers * 32; /* >= the tensors of any layer */
    gen_job *jobs = calloc((size_t)njobs_max, sizeof *jobs);
    if (!jobs) {
        qc_model_free(m);
        return qc_errf(err, QC_ERR_OOM, "synthetic model: out of memory");
    }
    int nj = 0;
    size_t total = 0;
    uint64_t id = 0;
#define ADD(t, dt, nd_, s0, s1, s2, mean_, std_, kind_)                              \
    do {                                                                           \
        qc_tensor *t_ = (t);                                                       \
        t_->dtype = (dt), t_->ndim = (nd_);                                        \
        t_->shape[0] = (s0), t_->shape[1] = (s1), t_->shape[2] = (s2);             \
        gen_job *j_ = &jobs[nj++];                                                 \
        j_->dst = t_, j_->numel = qc_tensor_numel(t_), j_->offset = total;         \
        j_->mean = (mean_), j_->std = (std_), j_->kind = (kind_), j_->id = id++;   \
        total += (qc_dtype_row_bytes((dt), (int64_t)j_->numel) + 63) & ~(size_t)63; \
    } while (0)
    int64_t V = c->vocab_size, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t nh = c->n_heads, nkv = c->n_kv_heads, nv = c->lin_n_v_heads, K = c->conv_kernel;
    int64_t vd = qc_cfg_value_dim(c), C = qc_cfg_conv_dim(c);
    float sH = (float)(1.0 / sqrt((double)H));
    ADD(&m->embed, odt, 2, V, H, 0, 0.0f, sH, G_NORMAL);
    ADD(&m->final_norm, odt, 1, H, 0, 0, 0.0f, 0.1f, G_NORMAL);
    if (!c->tie_word_embeddings) ADD(&m->lm_head, pdt, 2, V, H, 0, 0.0f, sH, G_NORMAL);
    else id++; /* keep every later tensor's id (hence values) independent of tying */
    for (int li = 0; li < c->n_layers; li++) {
        qc_layer_weights *w = &m->layers[li];
        ADD(&w->input_norm, odt, 1, H, 0, 0, 0.0f, 0.1f, G_NORMAL);
        ADD(&w->post_norm, odt, 1, H, 0, 0, 0.0f, 0.1f, G_NORMAL);
        if (!qc_cfg_is_moe(c)) {
            ADD(&w->mlp_gate, pdt, 2, I, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->mlp_up, pdt, 2, I, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->mlp_down, pdt, 2, H, I, 0, 0.0f, (float)(1.0 / sqrt((double)I)), G_NORMAL);
        } else {
            for (int q = 0; q < QC_MOE_N; q++) { /* router, experts, shared expert (+ gate) */
                int64_t sh[4];
                int nd = qc_moe_shape(c, q, sh);
                ADD(qc_moe_view(w, q), odt, nd, sh[0], sh[1], sh[2], 0.0f,
                    qc_moe_synth_std(c, q), G_NORMAL);
            }
        }
        if (c->layer_types[li] == QC_LAYER_FULL) {
            ADD(&w->q_proj, pdt, 2, 2 * nh * hd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->k_proj, pdt, 2, nkv * hd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->v_proj, pdt, 2, nkv * hd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->o_proj, pdt, 2, H, nh * hd, 0, 0.0f, (float)(1.0 / sqrt((double)(nh * hd))),
                G_NORMAL);
            ADD(&w->q_norm, odt, 1, hd, 0, 0, 0.0f, 0.1f, G_NORMAL);
            ADD(&w->k_norm, odt, 1, hd, 0, 0, 0.0f, 0.1f, G_NORMAL);
        } else {
            ADD(&w->in_proj_qkv, pdt, 2, C, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->in_proj_z, pdt, 2, vd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->in_proj_b, pdt, 2, nv, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->in_proj_a, pdt, 2, nv, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->conv1d, odt, 3, C, 1, K, 0.0f, (float)(1.0 / sqrt((double)K)), G_NORMAL);
            ADD(&w->dt_bias, odt, 1, nv, 0, 0, 0.0f, 0.5f, G_NORMAL);
            ADD(&w->A_log, QC_F32, 1, nv, 0, 0, 0.0f, 0.0f, G_ALOG);
            ADD(&w->lin_norm, QC_F32, 1, c->lin_v_dim, 0, 0, 1.0f, 0.1f, G_NORMAL);
            ADD(&w->out_proj, pdt, 2, H, vd, 0, 0.0f, (float)(1.0 / sqrt((double)vd)), G_NORMAL);
        }
    }
#undef ADD
    qc_model_priv *p = (qc_model_priv *)m->priv;
    uint8_t *arena = qc_model_priv_weights(p, total);
    if (!arena) {
        free(jobs);
        qc_model_free(m);
        return qc_errf(err, QC_ERR_OOM, "synthetic model: cannot allocate %zu bytes of weights", total);
    }
    size_t nblocks = 0;
    for (int j = 0; j < nj; j++) {
        jobs[j].dst->data = arena + jobs[j].offset;
        nblocks += (jobs[j].numel + SYN_BLOCK - 1) / SYN_BLOCK;
    }
    /* flatten (job, block) pairs so the big tensors spread over threads */
    size_t *bj = malloc((nblocks ? nblocks : 1) * 2 * sizeof *bj);
    if (!bj) {
        free(jobs);
        qc_model_free(m);
        return qc_errf(err, QC_ERR_OOM, "synthetic model: out of memory");
    }
    size_t k = 0;
    for (int j = 0; j < nj; j++)
        for (size_t b = 0; b * SYN_BLOCK < jobs[j].numel; b++) bj[2 * k] = (size_t)j, bj[2 * k + 1] = b, k++;
    long nb = (long)nblocks;
#pragma omp parallel for schedule(dynamic, 8)
    for (long q = 0; q < nb; q++) gen_block(&jobs[bj[2 * q]], bj[2 * q + 1], seed);
    free(bj);
    free(jobs);
    if (c->tie_word_embeddings) m->lm_head = m->embed;
    m->n_tensors_loaded = nj;
    if ((st = qc_model_validate(m, err)) != QC_OK) { /* by construction: never */
        qc_model_free(m);
        return st;
    }
    *out = m;
    return QC_OK;
}
