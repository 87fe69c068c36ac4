/* main.c — the `qwen-conform` dispatcher.
 *
 *   qwen-conform [check] --golden DIR|FILE ...   conformance check (the default command)
 *   qwen-conform COMMAND ...                     a command of the table COMMANDS, which both
 *                                                dispatches and prints the usage text
 *   qwen-conform --version | --help
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qc/qc_probe.h"
#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_golden.h"

typedef int (*cmd_fn)(int argc, char **argv);

int qc_cmd_adapter_init(int argc, char **argv); /* qc_cmd_adapter_init.c */

/* Every command: its name, its entry (argv[0] = the command), its synopsis for the usage text
 * (first line after the name; "" continues the previous command's synopsis). */
static const struct {
    const char *name;
    cmd_fn fn;
    const char *synopsis;
} COMMANDS[] = {
    {"check", qc_cmd_check, "[check] --golden DIR|FILE [options]   check a runtime against goldens"},
    {"record", qc_cmd_record, "record --model DIR --tokens 1,2,3 [--decode N] --out F.h5"},
    {"inspect", qc_cmd_inspect, "inspect F.h5            provenance and coverage of a golden file"},
    {"diff", qc_cmd_diff, "diff GOLDEN.h5 ACTUAL.h5  check another runtime's output (golden layout)"},
    {"export-inputs", qc_cmd_export_inputs,
     "export-inputs GOLDEN|DIR --out DIR  each case's inputs as JSON"},
    {"calibrate", qc_cmd_calibrate, "calibrate --golden DIR  measure noise, suggest a tolerance policy"},
    {"policy", qc_cmd_policy, "policy --print [--policy F] [--golden DIR]  the effective policy"},
    {"bench", qc_cmd_bench, "bench ...               performance comparison of the backends"},
    {"drift-svg", qc_cmd_drift_svg, "drift-svg R.json --out F.svg   long_decode_drift curves of a report"},
    {"adapter-serve", qc_cmd_adapter_serve,
     "adapter-serve PLUGIN.so[,k=v...]  serve a plugin over the adapter\n"
     "                                            protocol on stdin/stdout (isolate:plugin:)"},
    {"adapter-init", qc_cmd_adapter_init,
     "adapter-init python|c DIR  write an adapter skeleton that passes out of the box"},
};
#define N_COMMANDS ((int)(sizeof COMMANDS / sizeof *COMMANDS))

static void print_usage(FILE *f) {
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "%s qwen-conform %s\n", i ? "      " : "usage:", COMMANDS[i].synopsis);
    fputs("       qwen-conform --version | --help\n"
          "Run `qwen-conform <command> --help` for the options of a command.\n"
          "Exit codes: 0 all passed, 1 conformance failure, 2 usage / I/O / format error,\n"
          "            3 nothing was checked.\n", f);
}

/* The optimized backend's run-time kernel choice (as its describe() names it), no model needed. */
static void print_isa(void) {
    const int t = qc_probe_max_threads();
    printf("optimized backend: optimized (%s, %d thread%s)\n", qc_probe_isa(), t, t == 1 ? "" : "s");
}

int main(int argc, char **argv) {
    { extern void qc_outpath_install_signal_handlers(void); qc_outpath_install_signal_handlers(); }
    if (argc < 2) {
        print_usage(stderr);
        return QC_EXIT_ERROR;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("qwen-conform %s (commit %s)\n", QC_VERSION, QC_GIT_COMMIT);
        print_isa();
        return QC_EXIT_PASS;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_usage(stdout);
        return QC_EXIT_PASS;
    }
    int rc = -1;
    for (int i = 0; i < N_COMMANDS && rc < 0; i++)
        if (!strcmp(cmd, COMMANDS[i].name)) rc = COMMANDS[i].fn(argc - 1, argv + 1);
    if (rc < 0 && cmd[0] == '-') rc = qc_cmd_check(argc, argv); /* default command */
    if (rc < 0) {
        const char *names[N_COMMANDS];
        for (int i = 0; i < N_COMMANDS; i++) names[i] = COMMANDS[i].name;
        const char *near = qc_cli_nearest(cmd, names, N_COMMANDS);
        fprintf(stderr, "qwen-conform: unknown command '%s'", cmd);
        if (near) fprintf(stderr, " (did you mean '%s'?)", near);
        fputc('\n', stderr);
        print_usage(stderr);
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
