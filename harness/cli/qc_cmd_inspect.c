/* qc_cmd_inspect.c — `qwen-conform inspect F.h5 ...`: a golden's provenance and what it covers.
 *
 * Opens each file with the full validation of qc_golden_open (a bad file is exit 2 with the
 * message naming the dataset), then prints: every root attribute, a summary of the config,
 * whether the model directory exists and its SHA-256 hashes match the recorded ones (computed
 * here from the files, independently of the loader), and per case its positions, lengths,
 * minimum decode margin and which groups are present (the router and moe_in datasets of a MoE
 * golden, mlp_in of a dense one among them). Exit 0 when every file is readable.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc_cli.h"
#include "qc_golden.h"
#include "qc/qc_sha256.h"
#include "qc_cli_common.h"

static const char *PROG = "qwen-conform inspect";

/* ===================================================================================== */
/* model directory checks                                                                */
/* ===================================================================================== */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* SHA-256 of every *.safetensors in dir, concatenated in ascending file-name order (the
 * schema's weights_sha256). *n_files receives the count. */
static qc_status weights_sha256(const char *dir, char hex[65], int *n_files, qc_err *err) {
    DIR *d = opendir(dir);
    if (!d) return qc_errf(err, QC_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    qc_status st = QC_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 12 || strcmp(e->d_name + len - 12, ".safetensors") != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) {
                st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir);
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (!st && n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
    qc_sha256_ctx c;
    qc_sha256_init(&c);
    unsigned char *buf = st ? NULL : malloc(1 << 20);
    if (!st && !buf) st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir);
    for (int i = 0; !st && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) { /* a FIFO would block fopen */
            st = qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
            break;
        }
        FILE *f = fopen(path, "rb");
        if (!f) {
            st = qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
            break;
        }
        size_t got;
        while ((got = fread(buf, 1, 1 << 20, f)) > 0) qc_sha256_update(&c, buf, got);
        if (ferror(f)) st = qc_errf(err, QC_ERR_IO, "%s: read error", path);
        fclose(f);
    }
    free(buf);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st) return st;
    uint8_t dg[32];
    qc_sha256_final(&c, dg);
    qc_sha256_to_hex(dg, hex);
    *n_files = n;
    return QC_OK;
}

static void print_model_check(const qc_golden *g) {
    struct stat sb;
    if (!g->model_dir[0]) {
        printf("model:          (no model_path recorded)\n");
        return;
    }
    int e = stat(g->model_dir, &sb) != 0 ? errno : 0;
    if (e || !S_ISDIR(sb.st_mode)) {
        printf("model:          %s: MISSING (%s)\n", g->model_dir,
               e ? strerror(e) : "not a directory");
        return;
    }
    printf("model:          %s: present\n", g->model_dir);
    qc_err err;
    qc_err_clear(&err);
    char cpath[2200], hex[65];
    snprintf(cpath, sizeof cpath, "%s/config.json", g->model_dir);
    if (qc_sha256_file_hex(cpath, hex, &err))
        printf("  config.json:  cannot hash: %s\n", err.msg);
    else
        printf("  config.json:  sha256 %s  %s\n", hex,
               strcmp(hex, g->config_sha256) == 0 ? "matches"
                                                  : "MISMATCH (the golden was made from a "
                                                    "different config)");
    int nf = 0;
    qc_err_clear(&err);
    if (weights_sha256(g->model_dir, hex, &nf, &err))
        printf("  weights:      cannot hash: %s\n", err.msg);
    else if (nf == 0)
        printf("  weights:      no *.safetensors files\n");
    else
        printf("  weights:      sha256 %s over %d file%s  %s\n", hex, nf, nf == 1 ? "" : "s",
               strcmp(hex, g->weights_sha256) == 0 ? "matches"
                                                   : "MISMATCH (the golden was made from "
                                                     "different weights)");
}

/* ===================================================================================== */
/* printing                                                                              */
/* ===================================================================================== */

static void print_config(const qc_config *c) {
    int n_full = 0;
    char kinds[QC_MAX_LAYERS + 1];
    for (int l = 0; l < c->n_layers; l++) {
        n_full += c->layer_types[l] == QC_LAYER_FULL;
        kinds[l] = c->layer_types[l] == QC_LAYER_FULL ? 'F' : 'L';
    }
    kinds[c->n_layers] = '\0';
    printf("config:         %d layers (%d linear, %d full: %s), hidden %d, intermediate %d, "
           "vocab %d\n", c->n_layers, c->n_layers - n_full, n_full, kinds, c->hidden_size,
           c->intermediate_size, c->vocab_size);
    printf("  attention:    %d heads x %d, %d kv heads, rotary_dim %d (partial %.4g), "
           "rope_theta %.6g\n", c->n_heads, c->head_dim, c->n_kv_heads, c->rotary_dim,
           c->partial_rotary_factor, c->rope_theta);
    printf("  deltanet:     %d key heads x %d, %d value heads x %d, conv kernel %d\n",
           c->lin_n_k_heads, c->lin_k_dim, c->lin_n_v_heads, c->lin_v_dim, c->conv_kernel);
    if (qc_cfg_is_moe(c))
        printf("  moe:          %d experts, %d per token, expert intermediate %d, shared expert "
               "intermediate %d\n", c->n_experts, c->n_experts_per_tok, c->moe_intermediate_size,
               c->shared_expert_intermediate_size);
    printf("  other:        rms_eps %.3g, %s lm_head, %s config, weight dtype unknown (not "
           "recorded in goldens)\n", c->rms_eps, c->tie_word_embeddings ? "tied" : "untied",
           c->nested ? "nested text_config" : "flat");
}

/* moe: the golden's model is a MoE model (its mixer outputs are named moe_in, else mlp_in) */
static void print_case(const qc_golden_case *c, int moe) {
    char mseq[16], margin[32], groups[256];
    if (c->max_seq_len > 0)
        snprintf(mseq, sizeof mseq, "%d", c->max_seq_len);
    else
        snprintf(mseq, sizeof mseq, "default");
    if (c->decode_margins && c->n_decode > 0) {
        float m = c->decode_margins[0];
        for (int s = 1; s < c->n_decode; s++)
            if (c->decode_margins[s] < m) m = c->decode_margins[s];
        snprintf(margin, sizeof margin, "%.4g", (double)m);
    } else {
        snprintf(margin, sizeof margin, "-");
    }
    size_t o = 0;
    groups[0] = '\0';
#define ADD(cond, s) \
    if (cond) o += (size_t)snprintf(groups + o, sizeof groups - o, "%s%s", o ? " " : "", s)
    ADD(c->n_history > 0, "history");
    ADD(1, "prefill/logits");
    ADD(c->prefill_hidden, "prefill/hidden");
    ADD(c->prefill_state.present, "prefill/state");
    ADD(c->prefill_topk_ids, "prefill/router");
    ADD(c->prefill_moe_in, moe ? "prefill/moe_in" : "prefill/mlp_in");
    ADD(c->n_decode > 0, "decode/logits");
    ADD(c->decode_margins, "decode/margins");
    ADD(c->decode_state.present, "decode/state");
    ADD(c->decode_topk_ids, "decode/router");
    ADD(c->decode_moe_in, moe ? "decode/moe_in" : "decode/mlp_in");
#undef ADD
    printf("  %-12s %9d %7d %5d %5d %11s %10s  %s\n", c->name, c->start_pos, c->n_history,
           c->n_tokens, c->n_decode, mseq, margin, groups);
    if (c->description[0]) printf("  %-12s   %s\n", "", c->description);
}

static void print_golden(const qc_golden *g) {
    printf("file:           %s\n", g->path);
    printf("schema_version: %d\n", g->schema_version);
    printf("generator:      %s\n", g->generator);
    printf("torch_version:  %s\n", g->torch_version[0] ? g->torch_version : "(none)");
    printf("compute_dtype:  %s\n", g->compute_dtype);
    printf("seed:           %lld\n", (long long)g->seed);
    printf("model_path:     %s\n", g->model_path);
    printf("config_sha256:  %s\n", g->config_sha256[0] ? g->config_sha256 : "(none)");
    printf("weights_sha256: %s\n", g->weights_sha256[0] ? g->weights_sha256 : "(none)");
    printf("config_json:    %zu bytes\n", strlen(g->config_json));
    print_config(&g->cfg);
    print_model_check(g);
    printf("cases (%d):\n", g->n_cases);
    if (g->n_cases > 0)
        printf("  %-12s %9s %7s %5s %5s %11s %10s  %s\n", "name", "start_pos", "history", "T",
               "S", "max_seq_len", "min_margin", "groups");
    for (int i = 0; i < g->n_cases; i++) print_case(&g->cases[i], qc_cfg_is_moe(&g->cfg));
}

/* ===================================================================================== */
/* entry point                                                                           */
/* ===================================================================================== */

int qc_cmd_inspect(int argc, char **argv) {
    qc_err err;
    qc_err_clear(&err);
    qc_argp p;
    qc_argp_init(&p, PROG, argc, argv);
    const char **files = calloc((size_t)(argc > 0 ? argc : 1), sizeof *files);
    int n = 0;
    if (!files) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return QC_EXIT_ERROR;
    }
    while (qc_argp_next(&p)) {
        if (p.positional) {
            files[n++] = p.arg;
        } else if (qc_argp_is(&p, "--help") || qc_argp_is(&p, "-h")) {
            printf("usage: qwen-conform inspect F.h5 [F2.h5 ...]\n"
                   "Shows a golden's provenance, config, model check and cases.\n");
            free(files);
            return QC_EXIT_PASS;
        } else {
            qc_argp_unknown(&p, &err);
            free(files);
            return qc_cli_fail(PROG, &err);
        }
    }
    if (n == 0) {
        qc_errf(&err, QC_ERR_ARG, "no golden file given (usage: qwen-conform inspect F.h5)");
        free(files);
        return qc_cli_fail(PROG, &err);
    }
    int rc = QC_EXIT_PASS;
    for (int i = 0; i < n; i++) {
        qc_golden *g = NULL;
        qc_err_clear(&err);
        if (qc_golden_open(files[i], &g, &err)) {
            rc = qc_cli_fail(PROG, &err);
            continue;
        }
        if (i > 0) printf("\n");
        print_golden(g);
        qc_golden_free(g);
    }
    fflush(stdout);
    free(files);
    return rc;
}
