/* qc/qc_optimized_profile.h — the optimized backend's per-op timer hook (`bench --profile-ops`).
 *
 * Off (the default) it costs one pointer load per op: qc_opt_run (qc_opt_pool.c) times a job
 * only when the backend's options carry a profile (qc_backend_opts.profile), and the forward
 * pass names the class of the ops it posts only then. The timing is the wall time of the posting thread from
 * posting a job to its last item done (the op's real cost, waiting for the helpers included),
 * added to sec[cur]. Serial code between jobs (embedding rows, RoPE tables, conv-state copies)
 * is not attributed: the caller gets it as the forward's total minus the sum.
 *
 * Ownership: qc_backend_opts.profile points to a caller-owned struct that outlives the backend
 * (qc_optimized_create); the forwards of that backend add to it. The reference backend ignores
 * it.
 */
#ifndef QC_OPT_PROFILE_H
#define QC_OPT_PROFILE_H

enum {
    QC_OP_PROJ,     /* the layers' projection GEMMs / matrix-vector products */
    QC_OP_DELTANET, /* the delta rule per value head (chunked or token recurrence) */
    QC_OP_ATTN,     /* q/k norm + RoPE + the causal softmax core */
    QC_OP_CONV,     /* the DeltaNet causal conv + SiLU, l2norm, beta, g */
    QC_OP_NORM,     /* RMSNorms (block inputs, final, gated) */
    QC_OP_ELEM,     /* SwiGLU, residual adds */
    QC_OP_LMHEAD,   /* the lm_head product (all rows or the last) */
    QC_OP_MOE,      /* a MoE block: router + top-k, expert gather / gate-up / act / down, shared expert */
    QC_OP_N
};

typedef struct qc_opt_profile {
    int cur;                /* class of the next job (set by the forward pass) */
    double sec[QC_OP_N];    /* seconds per class, accumulated */
    long jobs[QC_OP_N];     /* jobs per class, accumulated */
} qc_opt_profile;

/* Short names of the classes ("proj", "deltanet", ...); NULL past QC_OP_N. */
const char *qc_opt_prof_name(int cls);

#endif /* QC_OPT_PROFILE_H */
