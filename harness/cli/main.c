/* main.c — the `qwen-conform` dispatcher.
 *
 *   qwen-conform [check] --golden DIR|FILE ...   conformance check (the default command)
 *   qwen-conform record | inspect | diff | calibrate | bench | adapter-serve ...
 *   qwen-conform --version | --help
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qc/qc_probe.h"
#include "qc_cli.h"
#include "qc_golden.h"

static const char usage[] =
    "usage: qwen-conform [check] --golden DIR|FILE [options]   check a runtime against goldens\n"
    "       qwen-conform record --model DIR --tokens 1,2,3 [--decode N] --out F.h5\n"
    "       qwen-conform inspect F.h5            provenance and coverage of a golden file\n"
    "       qwen-conform diff GOLDEN.h5 ACTUAL.h5  check another runtime's output (golden layout)\n"
    "       qwen-conform export-inputs GOLDEN|DIR --out DIR  each case's inputs as JSON\n"
    "       qwen-conform calibrate --golden DIR  measure noise, suggest a tolerance policy\n"
    "       qwen-conform policy --print [--policy F] [--golden DIR]  the effective policy\n"
    "       qwen-conform bench ...               performance comparison of the backends\n"
    "       qwen-conform drift-svg R.json --out F.svg   long_decode_drift curves of a report\n"
    "       qwen-conform adapter-serve PLUGIN.so[,k=v...]  serve a plugin over the adapter\n"
    "                                            protocol on stdin/stdout (isolate:plugin:)\n"
    "       qwen-conform --version | --help\n"
    "Run `qwen-conform <command> --help` for the options of a command.\n"
    "Exit codes: 0 all passed, 1 conformance failure, 2 usage / I/O / format error,\n"
    "            3 nothing was checked.\n";

/* The optimized backend's run-time kernel choice (as its describe() names it), no model needed. */
static void print_isa(void) {
    const int t = qc_probe_max_threads();
    printf("optimized backend: optimized (%s, %d thread%s)\n", qc_probe_isa(), t, t == 1 ? "" : "s");
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
    else if (!strcmp(cmd, "policy")) rc = qc_cmd_policy(argc - 1, argv + 1);
    else if (!strcmp(cmd, "bench")) rc = qc_cmd_bench(argc - 1, argv + 1);
    else if (!strcmp(cmd, "adapter-serve")) rc = qc_cmd_adapter_serve(argc - 1, argv + 1);
    else if (!strcmp(cmd, "drift-svg")) rc = qc_cmd_drift_svg(argc - 1, argv + 1);
    else if (!strcmp(cmd, "export-inputs")) rc = qc_cmd_export_inputs(argc - 1, argv + 1);
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
