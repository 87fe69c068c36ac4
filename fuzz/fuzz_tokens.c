/* fuzz_tokens.c — libFuzzer target for the token-list parser (qc_cli_parse_tokens, the text of
 * --tokens and --tokens-file) and the vocabulary check (qc_cli_check_tokens).
 * Input: the list text (NUL-terminated copy; an embedded NUL ends it, as for a C string).
 * Checks: no crash / leak / UB; errors name the source; on success every id is in
 * [0, INT32_MAX], the count matches the number of items, and the vocabulary check accepts
 * exactly the lists whose ids are all below the vocabulary size. */
#include <ctype.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "../harness/io/qc_cli_common.h"

#define FZ_WHAT "fuzz/tokens.txt"
#define FZ_VOCAB 512

/* Items = maximal runs of characters other than whitespace and ','. */
static int count_items(const char *s) {
    int n = 0, in = 0;
    for (; *s; s++) {
        int sep = isspace((unsigned char)*s) || *s == ',';
        if (!sep && !in) n++;
        in = !sep;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fz_cstr(data, size);
    int32_t *ids = NULL;
    int n = -1;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_cli_parse_tokens(text, FZ_WHAT, &ids, &n, &err);
    fz_check_error(st, &err, FZ_WHAT);
    if (st == QC_OK) {
        FZ_REQUIRE(n == count_items(text), "n %d != %d items", n, count_items(text));
        FZ_REQUIRE((n == 0) == (ids == NULL), "empty list <-> NULL");
        int all_in = 1;
        for (int i = 0; i < n; i++) {
            FZ_REQUIRE(ids[i] >= 0, "id %d negative", (int)ids[i]);
            if (ids[i] >= FZ_VOCAB) all_in = 0;
        }
        qc_err e2;
        qc_err_clear(&e2);
        qc_status cs = qc_cli_check_tokens(ids, n, FZ_VOCAB, FZ_WHAT, &e2);
        fz_check_error(cs, &e2, FZ_WHAT);
        FZ_REQUIRE((cs == QC_OK) == all_in, "vocabulary check %d vs %d", (int)cs, all_in);
    } else {
        FZ_REQUIRE(ids == NULL && n == 0, "error left a list behind");
    }
    free(ids);
    free(text);
    return 0;
}
