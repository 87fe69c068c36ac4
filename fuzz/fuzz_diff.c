/* fuzz_diff.c — libFuzzer target for `qwen-conform diff GOLDEN.h5 ACTUAL.h5`: the ACTUAL file
 * another runtime wrote in the golden layout, read and compared with a golden.
 *
 * Structure-aware like fuzz_golden.c (whose golden_builder.h it reuses): the input is a
 * program of 4-byte edits [op, item, a, b] applied to the valid two-case golden of
 * golden_builder.h. An edit whose first byte has its three top bits set (op >= 0xE0) edits the
 * GOLDEN instead (about 1 in 8, so most runs compare a damaged or different ACTUAL against a
 * valid golden); the others edit the ACTUAL. The base program is the same for both, so an
 * input without edits is a passing diff, a NaN / Inf / integer poke into a float dataset is a
 * conformance failure at that element (or a file rejected for a NaN), a poked token id a case
 * "not run on the golden's inputs", a deleted hidden / state dataset a skipped or failed check,
 * a renamed case a missing one, a changed config_json "not the same model", ... The two files
 * are written with the HDF5 API to a private directory in $TMPDIR (/dev/shm preferred) and
 * the whole command runs in process: qc_cmd_diff("diff", G, A, --json, --junit, --quiet).
 *
 * Checks, beyond no crash / leak / UB / hang: the exit status is 0..3; exit 2 comes with an
 * error row in the JSON report or a one-line "qwen-conform diff: <file>: ..." message naming
 * one of the two files; exits 0, 1 and 3 write both reports, the JSON one parseable with a
 * schema_version and a summary, the JUnit one an XML document; no temp file is left beside
 * them; libhdf5 never faulted.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "../harness/io/qc_cli.h"
#include "../harness/io/qc_golden.h"
#include "golden_builder.h"

#define MAX_EDITS 64

static char g_dir[400], g_golden[512], g_actual[512], g_json[512], g_junit[512];
static char g_base_golden[512];  /* the unedited golden, written once */
static FILE *g_null;             /* the console output goes here */

static void rm_dir(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[1024];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    struct stat sb;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/qc-fuzz-diff-%d", base, (int)getpid());
    if (mkdir(g_dir, 0700) != 0 && stat(g_dir, &sb) != 0) abort();
    snprintf(g_golden, sizeof g_golden, "%s/golden.h5", g_dir);
    snprintf(g_base_golden, sizeof g_base_golden, "%s/base-golden.h5", g_dir);
    snprintf(g_actual, sizeof g_actual, "%s/actual.h5", g_dir);
    snprintf(g_json, sizeof g_json, "%s/report.json", g_dir);
    snprintf(g_junit, sizeof g_junit, "%s/report.xml", g_dir);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    golden_prog g;
    base_program(&g);
    if (write_program(&g, g_base_golden) != 0) abort();
    free_program(&g);
    g_null = fopen("/dev/null", "w");
    if (!g_null) abort();
    atexit(rm_dir);
    return 0;
}

/* Every file left in the directory is one of ours (no <report>.tmp.<pid>.<k>). */
static void check_no_temp(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        FZ_REQUIRE(strstr(e->d_name, ".tmp.") == NULL, "temp file left: %s/%s", g_dir, e->d_name);
    closedir(d);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) abort();
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    fclose(f);
    buf[len] = '\0';
    *n = len;
    return buf;
}

/* The JSON report: parseable, a schema_version, a summary; returns the summary's "errors"
 * count (-1 when the report has none). */
static int check_json_report(void) {
    size_t n = 0;
    char *t = slurp(g_json, &n);
    FZ_REQUIRE(t != NULL, "no JSON report written");
    cJSON *j = cJSON_ParseWithLength(t, n);
    FZ_REQUIRE(j != NULL, "the JSON report does not parse: %.200s", t);
    FZ_REQUIRE(cJSON_GetObjectItemCaseSensitive(j, "schema_version") != NULL,
               "the JSON report has no schema_version");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "summary");
    FZ_REQUIRE(cJSON_IsObject(s), "the JSON report has no summary");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "errors");
    int errors = cJSON_IsNumber(e) ? (int)e->valuedouble : -1;
    cJSON_Delete(j);
    free(t);
    return errors;
}

static void check_junit_report(void) {
    size_t n = 0;
    char *t = slurp(g_junit, &n);
    FZ_REQUIRE(t != NULL, "no JUnit report written");
    FZ_REQUIRE(strstr(t, "<testsuites") != NULL, "the JUnit report has no <testsuites>: %.200s", t);
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4 * MAX_EDITS) return 0;
    golden_prog act, gold;
    base_program(&act);
    base_program(&gold);
    int golden_edits = 0;
    for (size_t i = 0; i + 4 <= size; i += 4) {
        uint8_t op[4] = {data[i], data[i + 1], data[i + 2], data[i + 3]};
        if ((op[0] & 0xE0) == 0xE0) {
            op[0] &= 0x1F;
            apply_edit(&gold, op);
            golden_edits++;
        } else {
            apply_edit(&act, op);
        }
    }
    const char *golden = g_base_golden;
    int wrote = write_program(&act, g_actual);
    if (wrote == 0 && golden_edits) {
        wrote = write_program(&gold, g_golden);
        golden = g_golden;
    }
    free_program(&act);
    free_program(&gold);
    unlink(g_json);
    unlink(g_junit);
    if (wrote != 0) return 0;

    char *argv[] = {(char *)"diff", (char *)golden, g_actual, (char *)"--json", g_json,
                    (char *)"--junit", g_junit, (char *)"--quiet", NULL};
    char *err_text = NULL;
    size_t err_len = 0;
    FILE *mem = open_memstream(&err_text, &err_len);
    if (!mem) abort();
    /* stdout / stderr are plain variables in glibc: the command's console output and its
     * messages go to /dev/null and to memory; libFuzzer and the sanitizers keep fd 2 */
    FILE *saved_out = stdout, *saved_err = stderr;
    stdout = g_null;
    stderr = mem;
    int rc = qc_cmd_diff((int)(sizeof argv / sizeof argv[0]) - 1, argv);
    fflush(g_null);
    stdout = saved_out;
    stderr = saved_err;
    fclose(mem);

    static int verbose = -1;
    if (verbose < 0) verbose = getenv("QC_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "[exit %d] %s", rc, err_text && err_text[0] ? err_text : "\n");

    FZ_REQUIRE(!qc_golden_hdf5_faulted(), "libhdf5 faulted reading the files (%s)", err_text);
    FZ_REQUIRE(rc >= 0 && rc <= 3, "exit status %d", rc);
    check_no_temp();
    struct stat sb;
    int have_json = stat(g_json, &sb) == 0;
    if (rc == 2) {
        /* refused files: a message naming one of them; a case run on other inputs: an error
         * row in the reports */
        int named = err_text && strstr(err_text, "qwen-conform diff: ") &&
                    (strstr(err_text, g_actual) || strstr(err_text, golden));
        int error_row = have_json && check_json_report() > 0;
        FZ_REQUIRE(named || error_row, "exit 2 without a message naming a file or an error row: %s",
                   err_text);
        if (named) {
            /* one line per message */
            const char *first = strstr(err_text, "qwen-conform diff: ");
            FZ_REQUIRE(strchr(first, '\n') != NULL, "message not terminated: %s", first);
        }
    } else {
        FZ_REQUIRE(have_json, "exit %d without the JSON report", rc);
        int errors = check_json_report();
        FZ_REQUIRE(errors <= 0, "exit %d with %d error rows", rc, errors);
        check_junit_report();
    }
    free(err_text);
    return 0;
}
