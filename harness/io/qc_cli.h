/* qc_cli.h — subcommand entry points of the `qwen-conform` executable and its exit codes.
 * Each qc_cmd_* takes argv without the subcommand name (argv[0] = "qwen-conform <sub>") and
 * returns the process exit code. */
#ifndef QC_CLI_H
#define QC_CLI_H

enum {
    QC_EXIT_PASS = 0,    /* every check passed */
    QC_EXIT_FAIL = 1,    /* a conformance failure (or a perf regression for bench --baseline) */
    QC_EXIT_ERROR = 2,   /* usage / I/O / format error */
    QC_EXIT_NOTHING = 3  /* nothing was checked (an empty directory never passes) */
};

/* The commit this binary was built from (`git describe --always --dirty`, at build time);
 * the QC_GIT_COMMIT macro expands to this call. */
const char *qc_git_commit(void);

int qc_cmd_check(int argc, char **argv);     /* qwen-conform [check] --golden DIR|FILE ... */
int qc_cmd_record(int argc, char **argv);    /* qwen-conform record --model DIR ... --out F.h5 */
int qc_cmd_inspect(int argc, char **argv);   /* qwen-conform inspect F.h5 */
int qc_cmd_diff(int argc, char **argv);      /* qwen-conform diff GOLDEN.h5 ACTUAL.h5 */
int qc_cmd_calibrate(int argc, char **argv); /* qwen-conform calibrate --golden DIR */
int qc_cmd_policy(int argc, char **argv);    /* qwen-conform policy --print [--policy F] */
int qc_cmd_bench(int argc, char **argv);     /* qwen-conform bench --synthetic 0.8b ... */
int qc_cmd_adapter_serve(int argc, char **argv); /* qwen-conform adapter-serve PLUGIN.so[,k=v] */
int qc_cmd_drift_svg(int argc, char **argv);  /* qwen-conform drift-svg REPORT.json --out F.svg */
int qc_cmd_export_inputs(int argc, char **argv); /* qwen-conform export-inputs GOLDEN|DIR --out DIR */

#endif /* QC_CLI_H */
