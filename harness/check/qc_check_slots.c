/* qc_check_slots.c — the backends under test of one golden file (created through the registry,
 * with the thread twin and the capabilities row), report stems, dump files. */

#include "qc_check_internal.h"

#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc/qc_state.h"
#include "qc_remote.h"

/* ===================================================================================== */
/* per file                                                                              */
/* ===================================================================================== */

/* Report stem of a golden path: path relative to the --golden root without ".h5"; a final
 * "golden" component is dropped (fixtures/<name>/golden.h5 -> "<name>"); '/' -> '-'. */
void ck_make_stem(const char *path, const char *root, char *out, size_t n) {
    char rel[1024];
    size_t rl = strlen(root);
    struct stat sb;
    int root_is_dir = stat(root, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (root_is_dir && strncmp(path, root, rl) == 0) {
        const char *r = path + rl;
        while (*r == '/') r++;
        snprintf(rel, sizeof rel, "%s", r);
    } else {
        const char *b = strrchr(path, '/');
        snprintf(rel, sizeof rel, "%s", b ? b + 1 : path);
    }
    size_t L = strlen(rel);
    if (L > 3 && strcmp(rel + L - 3, ".h5") == 0) rel[L - 3] = 0;
    L = strlen(rel);
    if (strcmp(rel, "golden") == 0 || (L > 7 && strcmp(rel + L - 7, "/golden") == 0)) {
        if (L > 7) {
            rel[L - 7] = 0;
        } else {
            /* bare golden.h5: use its directory's name */
            char tmp[1024];
            snprintf(tmp, sizeof tmp, "%s", path);
            char *d = dirname(tmp);
            char tmp2[1024];
            snprintf(tmp2, sizeof tmp2, "%s", d);
            snprintf(rel, sizeof rel, "%s", basename(tmp2));
        }
    }
    for (char *p = rel; *p; p++)
        if (*p == '/') *p = '-';
    snprintf(out, n, "%s", rel);
}

int ck_cfg_same(const qc_config *a, const qc_config *b) {
    if (a->vocab_size != b->vocab_size || a->hidden_size != b->hidden_size ||
        a->intermediate_size != b->intermediate_size || a->n_layers != b->n_layers ||
        a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim || a->lin_n_k_heads != b->lin_n_k_heads ||
        a->lin_n_v_heads != b->lin_n_v_heads || a->lin_k_dim != b->lin_k_dim ||
        a->lin_v_dim != b->lin_v_dim || a->conv_kernel != b->conv_kernel ||
        a->n_experts != b->n_experts || a->n_experts_per_tok != b->n_experts_per_tok ||
        a->moe_intermediate_size != b->moe_intermediate_size ||
        a->shared_expert_intermediate_size != b->shared_expert_intermediate_size)
        return 0;
    for (int l = 0; l < a->n_layers; l++)
        if (a->layer_types[l] != b->layer_types[l]) return 0;
    return 1;
}

name_buf ck_dump_name(const char *name) {
    name_buf b;
    size_t i = 0;
    for (; name[i] && i < sizeof b.s - 1; i++) {
        char ch = name[i];
        b.s[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                         ch == '.' || ch == '-' || ch == '_'
                     ? ch
                     : '_';
    }
    b.s[i] = 0;
    return b;
}

/* The slots: the registry's built-in backends in table order, then the runtime under test;
 * which of them run (--backend; by default every built-in). With calibration, the sink gets
 * one entry per slot (named by the registry, "external" for the runtime under test) on the
 * first run. 0 on out of memory. */
int ck_slots_make(ck_ctx *c) {
    const qc_check_opts *o = c->o;
    const int nb = qc_registry_n_builtins();
    c->n_slots = nb + 1;
    c->ext_slot = nb;
    c->ref_slot = -1;
    c->slot = calloc((size_t)c->n_slots, sizeof *c->slot);
    if (!c->slot) return 0;
    for (int i = 0; i < nb; i++) {
        ck_slot *s = &c->slot[i];
        s->builtin = qc_registry_builtin(i);
        s->name = s->builtin->name;
        s->asked = i < 32 && ((o->builtins >> i) & 1u);
        s->run = o->builtins ? s->asked : !o->has_ext;
        if ((s->builtin->roles & QC_BUILTIN_REFERENCE) && c->ref_slot < 0) c->ref_slot = i;
    }
    ck_slot *x = &c->slot[c->ext_slot];
    x->name = o->has_ext ? o->ext.name : NULL;
    x->asked = x->run = o->has_ext;
    if (c->cal && !c->cal->slot) {
        c->cal->slot = calloc((size_t)c->n_slots, sizeof *c->cal->slot);
        if (!c->cal->slot) return 0;
        c->cal->n_slots = c->n_slots;
        for (int i = 0; i < c->n_slots; i++)
            snprintf(c->cal->slot[i].name, sizeof c->cal->slot[i].name, "%s",
                     c->slot[i].builtin ? c->slot[i].builtin->name : "external");
    }
    return 1;
}

/* One backend of a slot: by the registry, with the test-only fault wrapper on the built-ins,
 * the other-thread-count twin when the backend honours threads, and the capabilities row of a
 * runtime under test (a FAIL when --require names one it lacks). A built-in without the threads
 * capability runs at its default thread count; the others at --threads. */
void ck_create_slot(ck_ctx *c, ck_backends *bs, int bi, const char *model_dir, const qc_model *model,
                        const qc_model *use_model, int maxctx) {
    const ck_slot *sl = &c->slot[bi];
    const qc_builtin_info *bin = sl->builtin; /* NULL: the runtime under test */
    const char *bname = sl->name;
    qc_runtime_spec builtin_rs;
    const qc_runtime_spec *rs = &c->o->ext;
    if (bin) {
        qc_registry_parse(bin->name, 0, &builtin_rs, NULL);
        rs = &builtin_rs;
    }
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = maxctx;
    bo.n_threads = bin && !(bin->caps & QC_BE_CAP_THREADS) ? 0 : c->o->threads;
    qc_err err;
    qc_err_clear(&err);
    /* faults are for the built-in self-test; a runtime under test loads its own model */
    const qc_model *m = bin ? use_model : model;
    qc_status s = qc_registry_create(rs, model_dir, m, &bo, &bs->be[bi], &err);
    if (s == QC_OK && bin && c->o->faults.stale_conv_state)
        s = ck_stale_wrap(bs->be[bi], &bs->be[bi], &err);
    if (s == QC_OK && bin) s = ck_state_faults_apply(&c->o->faults, &bs->be[bi], &err);
    if (s != QC_OK) {
        bs->be[bi] = NULL;
        if (sl->asked)
            ck_emit_simple(c, "_model", bname, "-", "create", ck_failed_run_verdict(s), err.msg, NULL);
        else if (c->o->quiet < QC_QUIET_ALL)
            fprintf(stderr, "qwen-conform: %s backend not available (%s); checking the others\n",
                    bname, err.msg);
        return;
    }
    qc_backend *be = bs->be[bi];
    const int names_isa = bin && (bin->roles & QC_BUILTIN_NAMES_ISA);
    if (names_isa && be->describe)
        snprintf(c->res->isa, sizeof c->res->isa, "%s", be->describe(be));
    if (be->caps & QC_BE_CAP_THREADS) {
        bo.n_threads = c->o->threads == 1 ? 2 : 1;
        qc_err_clear(&err);
        if (qc_registry_create(rs, model_dir, m, &bo, &bs->alt[bi], &err) == QC_OK &&
            bin && c->o->faults.stale_conv_state)
            ck_stale_wrap(bs->alt[bi], &bs->alt[bi], &err);
        else if (!bs->alt[bi])
            ck_emit_simple(c, "_model", bname, "-", "create_threads", ck_failed_run_verdict(err.code),
                           err.msg, NULL);
        if (bs->alt[bi] && bin &&
            ck_state_faults_apply(&c->o->faults, &bs->alt[bi], &err) != QC_OK)
            bs->alt[bi] = NULL;
        if (names_isa && bs->alt[bi] && bs->alt[bi]->describe &&
            bs->alt[bi]->opts.n_threads > 1)
            snprintf(c->res->isa, sizeof c->res->isa, "%s", bs->alt[bi]->describe(bs->alt[bi]));
    }
    /* capabilities */
    unsigned caps = be->caps | (be->max_tokens_per_call != 1 ? QC_REMOTE_CAP_DYNAMIC : 0);
    unsigned missing = c->o->require & ~caps;
    if (!bin || c->o->require) {
        char have[256], miss[256], key[900];
        qc_cap_list(caps, have, sizeof have);
        qc_cap_list(missing, miss, sizeof miss);
        char tpc[48], ctxs[48];
        snprintf(tpc, sizeof tpc, be->max_tokens_per_call > 0 ? "%d" : "any",
                 be->max_tokens_per_call);
        snprintf(ctxs, sizeof ctxs, be->max_context_len > 0 ? "%d" : "no limit",
                 be->max_context_len);
        if (missing)
            snprintf(key, sizeof key, "%s lacks the required capabilities: %s (it announces: %s)",
                     be->describe ? be->describe(be) : bname, miss, have);
        else
            snprintf(key, sizeof key, "%s: capabilities %s; tokens per call %s; positions %s",
                     be->describe ? be->describe(be) : bname, have, tpc, ctxs);
        ck_emit_simple(c, "_model", bname, "-", "capabilities",
                       missing ? QC_VERDICT_FAIL : QC_VERDICT_PASS, key,
                       missing ? qc_strdup_printf("--require %s: the runtime does not announce "
                                                  "them, so the checks that need them cannot run",
                                                  miss)
                               : NULL);
    }
}

/* Write the actual tensors of one backend x mode in the golden layout. */
void ck_dump_actual(ck_ctx *c, const qc_golden *g, qc_golden_case *cases, int n, const char *path) {
    qc_golden *d = calloc(1, sizeof *d);
    if (!d) return;
    *d = *g;
    snprintf(d->generator, sizeof d->generator, "qwen-conform check %s (--dump-actual)", QC_VERSION);
    snprintf(d->compute_dtype, sizeof d->compute_dtype, "float32");
    snprintf(d->torch_version, sizeof d->torch_version, "%s", "");
    char *rp = realpath(g->model_dir, NULL);
    snprintf(d->model_path, sizeof d->model_path, "%s", rp ? rp : g->model_dir);
    free(rp);
    d->n_cases = n;
    d->cases = cases;
    qc_err err;
    qc_err_clear(&err);
    if (qc_golden_write(path, d, &err) != QC_OK) {
        /* an ERROR row: the run exits 2 and every report says why (the other reports are
         * still written) */
        fprintf(stderr, "qwen-conform: --dump-actual: %s\n", err.msg);
        char k[sizeof err.msg + 32];
        snprintf(k, sizeof k, "--dump-actual: %s", err.msg);
        ck_emit_simple(c, "_model", "-", "-", "dump_actual", QC_VERDICT_ERROR, k, NULL);
    } else if (c->o->quiet < QC_QUIET_ALL)
        fprintf(stderr, "qwen-conform: wrote actual tensors to %s\n", path);
    free(d);
}
