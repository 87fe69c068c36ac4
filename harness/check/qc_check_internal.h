/* qc_check_internal.h — what the check engine's files share (harness-private).
 *
 * The engine is split by concern (tests/check_cycles.py: no two files call each other):
 *   qc_check_rows.c       the bottom: a row made and emitted, run verdicts, the clock
 *   qc_check_run.c        one run of a case (profile, inputs, capture)
 *   qc_check_compare.c    parts, one comparison -> one row, calibration measurements
 *   qc_check_localise.c   the checks against the golden and the localisation of a failure
 *   qc_check_invariants.c garbage_reset, unused_slots
 *   qc_check_lifecycle*.c state lifecycle: snapshot / restore, rollback, prefix reuse, sequences
 *                         (the driver in qc_check_lifecycle_driver.c)
 *   qc_check_dn.c         the DeltaNet kernel checks (chunked_eq_recurrent, chunk_sweep)
 *   qc_check_slots.c      the backends under test of one file, stems, dump files
 *   qc_check_faults.c     test-only fault wrappers (model copy, stale conv state)
 *   qc_check_engine.c     running cases and modes, per file, the engine entry (qc_check_run)
 *   the command lines: qc_check_cli.h (qc_check.c, qc_cmd_diff.c, qc_cmd_calibrate.c, ...)
 * Backends under test sit in slots (ck_slot): the registry's built-in backends, enumerated
 * from its table (qc_registry_builtin), and one runtime under test (plugin, exec adapter or
 * server, named by its --backend spec).
 */
#ifndef QC_CHECK_INTERNAL_H
#define QC_CHECK_INTERNAL_H

#include "qc_check.h"

#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc_golden.h"
#include "qc/qc_model.h"
#include "qc_runcase.h"
#include "qc_metrics.h"
#include "qc_report_results.h"

#define N_MODES 3

/* Measured noise of one (backend, class, check kind). */
typedef struct {
    double max_abs;      /* max |a - g| */
    double max_rel;      /* max |a - g| / |g| over the large elements of each tensor
                            (|g| >= 1/4 of that tensor's max |g|) */
    double kl_max;       /* logits: max KL per row */
    double n;            /* elements measured */
    char where[200];     /* where max_abs was seen */
} calib_cell;

#define CAL_KIND_GOLDEN 0  /* vs the float64 golden */

#define CAL_KIND_CONSIST 1 /* float32 vs float32 (static/dynamic, chunked/recurrent, opt/ref) */

/* The measurements of one slot (ck_slot). */
typedef struct {
    char name[64];                 /* a built-in's registry name, "external" for the runtime
                                      under test */
    calib_cell c[2][QC_TC_COUNT];  /* per kind (CAL_KIND_*), class */
} calib_slot;

typedef struct {
    calib_slot *slot;      /* [n_slots]: one per engine slot, made by the first qc_check_run */
    int n_slots;
    long tensors;          /* tensors measured */
    /* per (stem/case, class): max |a - g| over backends, modes, kinds (to find outliers) */
    int n_case, cap_case;
    struct calib_case {
        char id[200];                  /* "<stem>/<case>" */
        double max_abs[QC_TC_COUNT];   /* per class */
        double max_rel[QC_TC_COUNT];   /* per class, large elements (as calib_cell.max_rel) */
        double kl_max;                 /* logits */
    } *cases;
} calib_sink;

/* A backend under test: a built-in of the registry's table or the runtime under test. */
typedef struct {
    const char *name;                 /* in reports (NULL: no runtime under test in its slot) */
    const qc_builtin_info *builtin;   /* its registry entry; NULL for the runtime under test */
    int asked;                        /* named by --backend: a creation failure is a row (else a
                                         note, and the others are checked) */
    int run;                          /* checked in this run */
    char dump_path[N_MODES][1400];    /* --dump-actual file per mode ("" = none) */
} ck_slot;

typedef struct {
    qc_check_opts *o;
    qc_policy *pol;
    qc_results *res;
    calib_sink *cal;
    /* the file being checked */
    const qc_golden *g;
    const char *stem;
    const qc_config *cfg;
    ck_slot *slot;                            /* [n_slots]: the registry's built-in backends
                                                 in table order, then the runtime under test */
    int n_slots;
    int ref_slot;                             /* the reference built-in's slot (-1: none) */
    int ext_slot;                             /* the runtime under test's slot (the last) */
    double t_row;                             /* start time of the current row */
    struct qc_server *srv;                    /* the runtime under test is a server (http:):
                                                 open for the whole run, else NULL */
    long listed;                              /* ids printed by --list */
} ck_ctx;

#define MAX_PARTS (4 * QC_MAX_LAYERS + 8)

typedef struct {
    qc_tdesc d;        /* shape, meaning, class (tolerance filled at compare time) */
    const float *a;    /* actual */
    const float *g;    /* golden / the other side */
} ck_part;

typedef struct {
    ck_part p[MAX_PARTS];
    int n;
    char problem[512]; /* a structural mismatch (shape, n_pos): the check fails with it */
} ck_partlist;

typedef struct {
    const char *case_name;  /* case */
    const char *backend;    /* backend under test */
    const char *mode;       /* mode column */
    const char *check;      /* check name */
    int bitwise;            /* exact comparison */
    int logits_stats;       /* top-1 / KL on logits parts */
    int vs_golden;          /* 1: g is the golden (h5diff line, calibration kind) */
    const char *dump_file;  /* actual file for the h5diff line (vs_golden) or NULL */
    const char *loc_text;   /* localisation to append on failure (may be NULL) */
    const qc_localisation *loc; /* the same, structured, for the row (may be NULL) */
    const char *extra;      /* extra detail line (may be NULL) */
    const char *advice;     /* vs_golden: replaces the h5diff / --dump-actual line (diff: ""
                               for an ACTUAL not in the golden's shapes); NULL: the default */
} cmp_spec;

typedef struct {
    float *hidden;          /* [L+1, T, H] */
    unsigned char *seen;    /* [L+1, T] */
    int L1, T, H;           /* L+1, prompt length, hidden size */
    int lo;                 /* absolute position of prompt row 0 */
    int bad;                /* a call with an unexpected width / index */
    struct ck_moecap *moe;  /* MoE: where "moe_in" / "router_topk" calls go (NULL: dropped);
                               hidden may then be NULL (hidden calls dropped) */
} ck_hcap;

/* MoE trace capture of one run (qc_check_router.c): every prompt and decode position of the
 * case, the residual before each layer's MoE block and the router's choices. */
typedef struct ck_moecap {
    int L, K, H;            /* layers, experts per token, hidden size */
    int lo, n;              /* absolute position of row 0 (start_pos), rows (prompt + decode) */
    float *moe_in;          /* [L, n, H] */
    float *topk;            /* [L, n, 2K]: K ids (as floats), K weights */
    unsigned char *seen_in; /* [L, n] */
    unsigned char *seen_tk; /* [L, n] */
    int bad;                /* a MoE trace call with a wrong width / index */
} ck_moecap;

/* (c) a model copy whose zero-centred norm weights w' satisfy 1 + w' = w, so a correct
 * (1 + w') norm computes what a buggy "w" norm would. */
typedef struct {
    qc_model m;                 /* the copy handed to the backend */
    qc_layer_weights *layers;   /* [L] copied views */
    float **bufs;               /* owned F32 buffers */
    int n_bufs;
} fault_model;

/* ---- qc_check_rows.c: the bottom (rows, verdicts, clock; calls no check family) ---- */
/* Wall clock, seconds (monotonic). */
double ck_wall(void);
/* --maxfail: 1 when N rows have FAILED or ERRORED; the caller, about to start more work,
 * stops (and c->o->stopped records that work was left). */
int ck_stop_now(ck_ctx *c);
/* The slot of a backend name in c (0 when unknown). */
int ck_slot_of(const ck_ctx *c, const char *name);
/* Add a row to the results and stream it to the console. */
void ck_emit(ck_ctx *c, qc_check_row *row);
void ck_row_init(qc_check_row *r, const char *stem, const char *case_name, const char *backend,
                 const char *mode, const char *check);
/* A row without metrics; detail (may be NULL) is taken over by the results. */
void ck_emit_simple(ck_ctx *c, const char *case_name, const char *backend, const char *mode,
                    const char *check, qc_verdict v, const char *keyline, char *detail);
/* A localisation that names nothing yet (kind NONE, layer -1, step -1). */
void ck_loc_init(qc_localisation *L);
/* A run that could not be made: QC_ERR_RUNTIME -> FAIL, QC_ERR_UNSUPPORTED -> SKIP, else ERROR. */
qc_verdict ck_failed_run_verdict(qc_status s);
/* A SKIP row "capability 'x' not announced by <backend>". */
void ck_emit_cap_skip(ck_ctx *c, const char *case_name, const char *bname, const char *mode,
                      const char *check, unsigned cap);
/* "full_attention" / "linear_attention" ("?" outside the model). */
const char *ck_layer_kind(const qc_config *cfg, int l);

/* ---- qc_check_run.c: one run of a case ---- */
/* The profile of a case in a mode (context for history + prompt + decode + extra). */
void ck_case_profile(const qc_golden_case *gc, qc_mode mode, int extra, qc_profile *p);
/* One run of gc in a mode (garbage: start from a NaN-filled state), hidden states into hc when
 * not NULL; out is filled (qc_case_free) on QC_OK. */
qc_status ck_run_one(qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                     const qc_check_opts *o, int garbage, ck_hcap *hc, qc_golden_case *out,
                     qc_err *err);
/* ck_run_one with the kernel options of call (dn_kernel, chunk_size; NULL: the backend's
 * defaults); its trace is replaced by hc's capture when hc is not NULL. */
qc_status ck_run_call(qc_backend *be, const qc_call *call, const qc_golden_case *gc,
                      qc_mode mode, const qc_check_opts *o, int garbage, ck_hcap *hc,
                      qc_golden_case *out, qc_err *err);

/* ---- qc_check_compare.c ---- */
/* The detail of a failed model load: msg, and when the golden's model directory has no
 * config.json (a golden copied away from its model) a hint at --model. malloc'd or NULL. */
char *ck_model_hint(const ck_ctx *c, const qc_golden *g, const char *msg);
void ck_pl_add(ck_partlist *pl, const qc_tdesc *d, const float *a, const float *g);
/* ck_pl_add of layer l's state buffer `cls` at `when`, path and geometry filled in. */
void ck_pl_add_state(ck_partlist *pl, const qc_config *cfg, const char *when, int l, qc_tclass cls,
                     int nd, const int64_t *sh, const float *pa, const float *pg);
void ck_desc_logits(qc_tdesc *d, const char *path, int rows, int V, int pos0, int decode);
/* The state tensors of class cls (every class when cls < 0) at "prefill" / "decode". */
void ck_add_state_parts(ck_partlist *pl, const qc_config *cfg, const char *when, int cls,
                        const qc_golden_state *a, const qc_golden_state *g);
/* Every tensor of a run: prefill + decode logits and both states. */
void ck_add_all_parts(ck_partlist *pl, const qc_config *cfg, const qc_golden_case *a,
                      const qc_golden_case *g);
void ck_calib_measure(ck_ctx *c, int slot, int kind, const ck_part *p, const char *case_name);
struct calib_case *ck_calib_case_get(calib_sink *cs, const char *stem, const char *cname);
/* One comparison -> one row; returns its verdict. */
qc_verdict ck_compare_parts(ck_ctx *c, const cmp_spec *s, ck_partlist *pl);
/* ---- qc_check_tier.c ---- */
/* After a logits comparison against the golden: the tier's distribution rows (none without a
 * tier in force: qc_policy_tier). */
void ck_tier_rows(ck_ctx *c, const cmp_spec *s, const ck_partlist *pl);
/* The tier's NMSE gate of a comparison against the golden (0: element-wise, as without one). */
double ck_tier_nmse(const ck_ctx *c, const cmp_spec *s, const ck_partlist *pl);
/* The trace hook that fills an hcap. */
void ck_hcap_cb(void *user, int index, const char *name, int start_pos, int n_tokens, int dim,
                const float *data);

/* ---- qc_check_faults.c ---- */
qc_status ck_fault_model_make(const qc_model *src, int layer, fault_model **out, qc_err *err);
void ck_fault_model_free(fault_model *fm);
/* Wrap inner so that conv_state keeps stale columns after a reset (takes inner over). */
qc_status ck_stale_wrap(qc_backend *inner, qc_backend **out, qc_err *err);

/* ---- qc_check_localise.c (ck_make_stem, ck_cfg_same: qc_check_slots.c) ---- */
/* prefill.hidden row + localisation text; returns 1 when it names a divergent layer. */
int ck_check_hidden(ck_ctx *c, const cmp_spec *base, const qc_golden_case *gc, ck_hcap *hc, char *loc,
                    size_t loclen, qc_localisation *L);
/* Append to loc the lowest layer whose `when` ("prefill" / "decode") state fails. */
void ck_state_localisation(ck_ctx *c, const qc_golden_case *act, const qc_golden_case *gc,
                           const char *when, const char *backend, const char *mode, char *loc,
                           size_t loclen, qc_localisation *L);
/* The same from prepared state parts pl (one layer's state tensor per part; diff builds them
 * from an ACTUAL whose states may be partial). */
void ck_state_localise_parts(ck_ctx *c, ck_partlist *pl, const qc_golden_case *gc, const char *when,
                             const char *backend, const char *mode, char *loc, size_t loclen,
                             qc_localisation *L);
/* Every check of one run against the golden. state_skip: NULL, or why the actual run has no
 * state buffers (the state checks are then SKIPPED with it). decode_loc: NULL, or the
 * hidden-state localisation at the first failing decode step (appended to the decode-only
 * localisation). */
void ck_vs_golden_checks(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                         const char *backend, const char *mode, const char *dump_file,
                         const char *loc, const qc_localisation *L, const char *state_skip,
                         const char *decode_loc, const qc_localisation *decode_L);
/* The first decode step whose logits row is over tolerance (-1: none); the same for the prefill
 * rows (prefill = 1). */
int ck_first_bad_logits_row(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                            const char *backend, const char *mode, int prefill);
void ck_make_stem(const char *path, const char *root, char *out, size_t n);
int ck_cfg_same(const qc_config *a, const qc_config *b);


/* ---- backends under test of one file (qc_check_slots.c) ---- */
typedef struct {
    qc_backend **be;              /* [n_slots] main backends (NULL when not checked) */
    qc_backend **alt;             /* [n_slots] the same backend with the other thread count (2
                                     when the main runs use 1, else 1) for threads_bitwise
                                     (NULL: none) */
    qc_backend *cmp;              /* the reference backend, to localise decode-only failures of
                                     the others by their hidden states (borrowed from the
                                     reference slot, or owned when own_cmp) */
    int own_cmp;
    int max_tokens;
} ck_backends;

/* A backend name as a file-name component ("exec:python3 x.py" -> "exec_python3_x.py"). */
typedef struct {
    char s[96];
} name_buf;
/* A backend name as a file-name component ("exec:x.py" -> "exec_x.py"). */
name_buf ck_dump_name(const char *name);
/* The slots of c (c->o set): the registry's built-in backends in table order, then the runtime
 * under test; which run (--backend; by default every built-in); with calibration the sink's
 * entries (one per slot) on the first run. 0 on out of memory. */
int ck_slots_make(ck_ctx *c);
/* Create slot bi's backend (and its thread twin) and emit its capabilities row. */
void ck_create_slot(ck_ctx *c, ck_backends *bs, int bi, const char *model_dir, const qc_model *model,
                    const qc_model *use_model, int maxctx);
/* Write the actual tensors of one backend x mode in the golden layout. */
void ck_dump_actual(ck_ctx *c, const qc_golden *g, qc_golden_case *cases, int n, const char *path);


/* ---- qc_check_lifecycle*.c: snapshot / rollback / prefix reuse / sequences ---- */
void ck_check_lifecycle(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                        const int *have);

/* ---- qc_check_drift.c: long_decode_drift ---- */
/* Cases with at least this many decode steps are long decodes: long_decode_drift runs on them
 * and their nokv mode (which recomputes the whole sequence at every step) is SKIPPED. */
#define CK_DRIFT_MIN_STEPS 256
int ck_drift_is_long(const qc_golden_case *gc);
/* The long_decode_drift row of one (backend bname, mode): a no-op for a short case. */
void ck_check_drift(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                    qc_mode mode);

/* ---- qc_check_hazard.c: hazard_finite ---- */
/* On a case with the `hazards` attribute: one row, every value of the run act finite (no-op for
 * other cases). */
void ck_check_hazard(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                     const char *bname, const char *mname);

/* ---- qc_check_faults_state.c: the state-precision and chunked-exponent faults ---- */
/* Wrap inner so that every forward call ends with the recurrent state rounded to bf16
 * (round to nearest even; takes inner over). */
qc_status ck_bf16_state_wrap(qc_backend *inner, qc_backend **out, qc_err *err);
/* The faults of this file that f selects, applied to a built-in backend *be (replaced by its
 * wrapper; on error *be is destroyed and NULL): recurrent_bf16 on both, unguarded_exp on the
 * reference only (the optimized backend is left as it is). */
qc_status ck_state_faults_apply(const qc_check_faults *f, qc_backend **be, qc_err *err);

/* ---- qc_check_router.c: MoE (router_topk, mixer / MoE-block localisation) ---- */
/* Allocate mc for every prompt + decode position of gc (cfg MoE). QC_OK or QC_ERR_OOM. */
qc_status ck_moecap_init(ck_moecap *mc, const qc_config *cfg, const qc_golden_case *gc);
void ck_moecap_free(ck_moecap *mc);
/* Store one "moe_in" / "router_topk" trace call (other names ignored). */
void ck_moecap_feed(ck_moecap *mc, int index, const char *name, int start_pos, int n_tokens,
                    int dim, const float *data);
/* The capture as out's router datasets (record): prefill_topk_ids / _weights [L, T, k] from
 * rows [0, T), decode_* [L, S, k] from the rest, and prefill_moe_in / decode_moe_in when
 * with_in and traced for every row. Nothing is set when some row has no router_topk trace.
 * QC_OK, QC_ERR_OOM, or QC_ERR_RUNTIME for a malformed trace (a wrong width or layer, an id that
 * is not a distinct integer in [0, E)); what was set is freed with the case. */
qc_status ck_moecap_export(const ck_moecap *mc, int E, int T, int with_in, qc_golden_case *out,
                           qc_err *err);
/* The router_topk row of one run (backend, mode) against the golden's router datasets. */
void ck_check_router(ck_ctx *c, const qc_golden_case *gc, const ck_moecap *mc, const char *backend,
                     const char *mode, const char *loc);
/* A first divergent layer l (hidden[l + 1] off, hidden[l] fine) of a MoE run: appends to loc
 * whether it starts in l's mixer or in its MoE block, and where the router chose differently
 * (which expert); fills L->block / L->expert_*. No-op without moe_in data. */
void ck_moe_localise(ck_ctx *c, const qc_golden_case *gc, const ck_moecap *mc, const ck_hcap *hc,
                     int l, const char *backend, const char *mode, char *loc, size_t loclen,
                     qc_localisation *L);
/* The router comparison itself, shared with diff (an ACTUAL's prefill/router datasets). */
#define CK_ROUTER_MAX_K 64
typedef struct {
    int layer, row, decode, pos;  /* where (layer -1: none); pos absolute; row = step if decode */
    int missing, extra;           /* a golden id not chosen / an id chosen instead (-1: none);
                                     worst weight: missing = the expert */
    double margin;                /* golden p_k - p_(k+1) of the row */
    int32_t expected[CK_ROUTER_MAX_K], got[CK_ROUTER_MAX_K];
} ck_router_flip;
typedef struct {
    double threshold;             /* the golden's router_margin_threshold (<= 0: none) */
    long rows, agree, flips, near_tie, missing;  /* rows compared; missing: not traced */
    long n_w, bad_w;              /* weights compared / over tolerance */
    double max_w_diff, w_expected, w_got, w_allow;     /* at worst_w */
    double fw_expected, fw_got;                        /* at first_w */
    ck_router_flip first_flip, first_tie, worst_w, first_w; /* first_w: first weight over
                                                               tolerance (lowest layer) */
} ck_router_tally;
void ck_router_tally_init(ck_router_tally *t, double threshold);
/* Compare rows [L, rows, K] of the golden (gids, gw, gm; gw / gm may be NULL) with the actual:
 * from the capture mc (its last `rows` rows when decode, else its first), or from aids / aw
 * ([L, rows, K], aw may be NULL). pos0: the position of row 0. */
void ck_router_tally_add(ck_router_tally *t, const qc_tol *tol, int L, int rows, int K, int E,
                         int decode, int pos0, const int32_t *gids, const float *gw,
                         const float *gm, const int32_t *aids, const float *aw,
                         const ck_moecap *mc);
/* The router_topk row from a tally (loc: a localisation text to append to a failure, or NULL). */
void ck_router_emit(ck_ctx *c, const qc_golden_case *gc, const ck_router_tally *t,
                    const char *backend, const char *mode, const char *loc);

/* ---- qc_check_dn.c: chunked_eq_recurrent, chunk_sweep ---- */
/* The DeltaNet kernel checks of (gc, be) in dynamic mode; dyn: the dynamic-mode run (the chunked
 * run of a built-in backend). A runtime under test is told dn_kernel / chunk_size for these
 * runs only (qc_remote.h QC_REMOTE_KOPTS_ASK) and left in QC_REMOTE_KOPTS_OWN. */
void ck_check_dn_variants(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                          const qc_golden_case *dyn);

/* ---- qc_check_invariants.c ---- */
/* garbage_reset and unused_slots of one (backend, mode), against the fresh run act. */
void ck_check_garbage_and_slots(ck_ctx *c, qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                                const qc_golden_case *act);

#endif /* QC_CHECK_INTERNAL_H */
