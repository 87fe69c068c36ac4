/* main.c — the `qwen-conform` dispatcher.
 *
 *   qwen-conform [check] --golden DIR|FILE ...   conformance check (the default command)
 *   qwen-conform record | inspect | diff | calibrate | bench | adapter-serve ...
 *   qwen-conform --version | --help
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qc/qc_backend.h"
#include "qc/qc_cli.h"
#include "qc/qc_golden.h"
#include "qc/qc_config.h"
#include "qc/qc_model.h"

static const char usage[] =
    "usage: qwen-conform [check] --golden DIR|FILE [options]   check a runtime against goldens\n"
    "       qwen-conform record --model DIR --tokens 1,2,3 [--decode N] --out F.h5\n"
    "       qwen-conform inspect F.h5            provenance and coverage of a golden file\n"
    "       qwen-conform diff GOLDEN.h5 ACTUAL.h5  check another runtime's output (golden layout)\n"
    "       qwen-conform calibrate --golden DIR  measure noise, suggest a tolerance policy\n"
    "       qwen-conform bench ...               performance comparison of the backends\n"
    "       qwen-conform adapter-serve PLUGIN.so[,k=v...]  serve a plugin over the adapter\n"
    "                                            protocol on stdin/stdout (isolate:plugin:)\n"
    "       qwen-conform --version | --help\n"
    "Run `qwen-conform <command> --help` for the options of a command.\n"
    "Exit codes: 0 all passed, 1 conformance failure, 2 usage / I/O / format error,\n"
    "            3 nothing was checked.\n";

/* The optimized backend's describe() (its run-time ISA choice) on a tiny synthetic model. */
static void print_isa(void) {
    qc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = 32;
    cfg.hidden_size = 16;
    cfg.intermediate_size = 32;
    cfg.n_layers = 2;
    cfg.n_heads = 2;
    cfg.n_kv_heads = 1;
    cfg.head_dim = 8;
    cfg.lin_n_k_heads = 1;
    cfg.lin_n_v_heads = 2;
    cfg.lin_k_dim = 8;
    cfg.lin_v_dim = 8;
    cfg.conv_kernel = 4;
    cfg.rms_eps = 1e-6;
    cfg.rope_theta = 10000.0;
    cfg.partial_rotary_factor = 0.25;
    cfg.rotary_dim = 2;
    cfg.tie_word_embeddings = 1;
    cfg.max_position_embeddings = 128;
    cfg.layer_types[0] = QC_LAYER_LINEAR;
    cfg.layer_types[1] = QC_LAYER_FULL;
    qc_model *m = NULL;
    qc_backend *be = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 4;
    if (qc_model_synthetic(&cfg, QC_F32, 1, &m, &err) == QC_OK &&
        qc_backend_create("optimized", m, &o, &be, &err) == QC_OK) {
        printf("optimized backend: %s\n", be->describe ? be->describe(be) : be->name);
    } else {
        printf("optimized backend: unavailable (%s)\n", err.msg);
    }
    qc_backend_destroy(be);
    qc_model_free(m);
}

int main(int argc, char **argv) {
    { extern void qc_outpath_install_signal_handlers(void); qc_outpath_install_signal_handlers(); }
    if (argc < 2) {
        fputs(usage, stderr);
        return QC_EXIT_ERROR;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("qwen-conform %s (commit %s)\n", QC_VERSION, QC_GIT_COMMIT);
        print_isa();
        return QC_EXIT_PASS;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return QC_EXIT_PASS;
    }
    int rc;
    if (!strcmp(cmd, "check")) rc = qc_cmd_check(argc - 1, argv + 1);
    else if (!strcmp(cmd, "record")) rc = qc_cmd_record(argc - 1, argv + 1);
    else if (!strcmp(cmd, "inspect")) rc = qc_cmd_inspect(argc - 1, argv + 1);
    else if (!strcmp(cmd, "diff")) rc = qc_cmd_diff(argc - 1, argv + 1);
    else if (!strcmp(cmd, "calibrate")) rc = qc_cmd_calibrate(argc - 1, argv + 1);
    else if (!strcmp(cmd, "bench")) rc = qc_cmd_bench(argc - 1, argv + 1);
    else if (!strcmp(cmd, "adapter-serve")) rc = qc_cmd_adapter_serve(argc - 1, argv + 1);
    else if (cmd[0] == '-') rc = qc_cmd_check(argc, argv); /* default command */
    else {
        fprintf(stderr, "qwen-conform: unknown command '%s'\n%s", cmd, usage);
        return QC_EXIT_ERROR;
    }
    /* After the HDF5 library faulted on a corrupt file (see qc_golden_hdf5_faulted) its own
     * exit-time cleanup would crash: leave without it. */
    if (qc_golden_hdf5_faulted()) {
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}
