/* qc_cmd_bench_stub.c — placeholder for `qwen-conform bench` until the optimized backend's
 * harness/qc_cmd_bench.c lands (that change deletes this file). Weak, so a real definition
 * linked alongside wins. */
#include <stdio.h>

#include "qc/qc_cli.h"

__attribute__((weak)) int qc_cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qwen-conform bench: not available in this build\n");
    return QC_EXIT_ERROR;
}
