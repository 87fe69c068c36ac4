/* qc_opt_options.c — the optimized backend's named options (its set_option, qc_backend.h):
 * the two work thresholds of qc_opt (qc_opt_internal.h), which create sets to their defaults
 * and every step reads per call, so a value holds from the next call on. Nothing is sized from
 * them (the scratch, the packed-token strips and the job board are sized from max_tokens and
 * the thread count), so any accepted value is safe at any point between calls:
 *   gemm_min = N   (integer >= 1; default 8) a projection over n >= N tokens (an MoE expert
 *                  with >= N tokens) runs the packed GEMM, fewer the matrix-vector kernels;
 *                  tests set 1 to run the GEMM path on decode steps of a tiny model
 *   par_min = W    (number >= 0; default 65536) a step runs on the threads only with at least
 *                  W multiply-adds of work; tests set 0 so a tiny model's every step is shared
 *   bf16_dot = 0|1 (default 0) 1: the packed GEMM of BF16 weights rounds the activations to
 *                  bf16 and multiplies with AVX512_BF16 vdpbf16ps (qc_opt_kernels_bf16dot.c),
 *                  as llama.cpp does: about twice the prefill rate, the numbers of the `bf16`
 *                  tier instead of the float32 policy; refused where the CPU lacks it.
 *                  be->kernels has QC_BE_KERNEL_BF16_DOT while it is on (qc_backend.h)
 *   amx = 0|1      (default 1 where the CPU has AMX-BF16 and the OS allows it) 1: the packed
 *                  GEMM of BF16 weights runs on the AMX tiles with each activation split in
 *                  two bf16, hi + lo (qc_opt_kernels_amx.c): within the float32 policy;
 *                  0: the FP32 FMA GEMM; 1 is refused where the CPU lacks it. bf16_dot=1
 *                  takes precedence
 * Results are bit-identical for any par_min (thread invariance, qc_opt_internal.h); gemm_min
 * selects a different kernel, within the backend's tolerance of the reference. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_opt_internal.h"

#define OPT_KEYS "gemm_min, par_min, bf16_dot, amx"

/* value as a whole decimal integer in [lo, INT_MAX]: 1 and *out, else 0 */
static int parse_int(const char *value, int lo, int *out) {
    char *end = NULL;
    errno = 0;
    const long v = strtol(value, &end, 10);
    if (!*value || *end || errno || v < lo || v > INT_MAX) return 0;
    *out = (int)v;
    return 1;
}

/* value as a whole finite number >= 0: 1 and *out, else 0 */
static int parse_work(const char *value, double *out) {
    char *end = NULL;
    errno = 0;
    const double v = strtod(value, &end);
    if (!*value || *end || errno || !isfinite(v) || !(v >= 0.0)) return 0;
    *out = v;
    return 1;
}

void qc_opt_describe_set(qc_backend *be) {
    qc_opt *o = be->impl;
    const qc_opt_bf16dot *g = o->bd ? o->bd : o->amx; /* the BF16 weight GEMM */
    be->kernels = o->bd ? QC_BE_KERNEL_BF16_DOT : o->amx ? QC_BE_KERNEL_AMX : 0u;
    snprintf(o->desc, sizeof o->desc, "optimized (%s%s%s, %d thread%s)", o->k->isa,
             g ? " + " : "", g ? g->name : "", o->nthreads, o->nthreads == 1 ? "" : "s");
}

qc_status qc_opt_set_option(qc_backend *be, const char *key, const char *value, qc_err *err) {
    qc_opt *o = be->impl;
    if (!key || !value)
        return qc_errf(err, QC_ERR_ARG, "optimized: set_option: key or value is NULL");
    if (!strcmp(key, "gemm_min")) {
        if (!parse_int(value, 1, &o->gemm_min))
            return qc_errf(err, QC_ERR_ARG, "optimized: option gemm_min: '%.40s' is not an "
                           "integer >= 1", value);
        return QC_OK;
    }
    if (!strcmp(key, "par_min")) {
        if (!parse_work(value, &o->par_min))
            return qc_errf(err, QC_ERR_ARG, "optimized: option par_min: '%.40s' is not a "
                           "finite number >= 0", value);
        return QC_OK;
    }
    if (!strcmp(key, "bf16_dot")) {
        if (strcmp(value, "0") && strcmp(value, "1"))
            return qc_errf(err, QC_ERR_ARG, "optimized: option bf16_dot: '%.40s' is not 0 or 1",
                           value);
        const qc_opt_bf16dot *bd = value[0] == '1' ? qc_opt_bf16dot_pick() : NULL;
        if (value[0] == '1' && !bd)
            return qc_errf(err, QC_ERR_UNSUPPORTED, "optimized: option bf16_dot: this CPU (or "
                           "the ISA chosen, %s) has no AVX512_BF16", o->k->isa);
        o->bd = bd;
        qc_opt_describe_set(be);
        return QC_OK;
    }
    if (!strcmp(key, "amx")) {
        if (strcmp(value, "0") && strcmp(value, "1"))
            return qc_errf(err, QC_ERR_ARG, "optimized: option amx: '%.40s' is not 0 or 1", value);
        const qc_opt_bf16dot *amx = value[0] == '1' ? qc_opt_amx_pick() : NULL;
        if (value[0] == '1' && !amx)
            return qc_errf(err, QC_ERR_UNSUPPORTED, "optimized: option amx: this CPU (or the "
                           "ISA chosen, %s, or the OS) has no AMX-BF16", o->k->isa);
        o->amx = amx;
        o->amx_q8 = amx ? qc_opt_amx_q8_pick() : NULL;
        qc_opt_describe_set(be);
        return QC_OK;
    }
    return qc_errf(err, QC_ERR_NO_OPTION, "optimized: unknown option '%.60s' (%s)", key,
                   OPT_KEYS);
}
