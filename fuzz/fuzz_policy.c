/* fuzz_policy.c — libFuzzer target for the tolerance-policy parser (qc_policy_parse) and its
 * lookup (POSIX regex selectors compiled at parse time, matched at lookup).
 * Input: the policy file's bytes.
 * Checks: no crash / leak / UB / hang; errors name the file; on success every class resolves to
 * finite, non-negative atol / rtol for a handful of subjects (including NULL subjects). */
#include <math.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "../harness/io/qc_policy.h"

#define FZ_PATH "fuzz/tolerances.json"

/* QC_FUZZ_SKIP_KNOWN=1 (exploration only, never in CI): skip inputs with more than 8
 * repetition operators, i.e. the known glibc regcomp blow-up of
 * fuzz/regressions/fuzz_policy/, so that the fuzzer can look past it. */
static int skip_known(const uint8_t *d, size_t n) {
    static int on = -1;
    if (on < 0) on = getenv("QC_FUZZ_SKIP_KNOWN") != NULL;
    if (!on) return 0;
    int q = 0;
    for (size_t i = 0; i < n; i++) q += d[i] == '+' || d[i] == '*' || d[i] == '?' || d[i] == '{';
    return q > 8;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (skip_known(data, size)) return 0;
    uint8_t *buf = fz_copy(data, size);
    qc_policy *p = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_policy_parse((const char *)buf, size, FZ_PATH, &p, &err);
    fz_check_error(st, &err, FZ_PATH);
    if (st == QC_OK) {
        FZ_REQUIRE(p != NULL, "OK without a policy");
        FZ_REQUIRE(qc_policy_n_overrides(p) >= 0, "n_overrides");
        FZ_REQUIRE(qc_policy_source(p) != NULL, "source");
        double tm = qc_policy_tie_margin(p);
        FZ_REQUIRE(!isnan(tm), "tie margin NaN");
        static const char *backends[] = {"reference", "optimized", NULL};
        static const char *tensors[] = {"prefill/logits", "decode/state/layer_03/k_cache", NULL};
        for (int c = 0; c < QC_TC_COUNT; c++)
            for (int b = 0; b < 3; b++)
                for (int t = 0; t < 3; t++) {
                    qc_tol tol;
                    const char *reason = NULL;
                    qc_policy_lookup(p, (qc_tclass)c, backends[b], b ? "dynamic" : NULL,
                                     t ? "state" : "logits", t == 1 ? "fx/len130" : NULL,
                                     tensors[t], &tol, &reason);
                    FZ_REQUIRE(isfinite(tol.atol) && tol.atol >= 0, "atol %g", tol.atol);
                    FZ_REQUIRE(isfinite(tol.rtol) && tol.rtol >= 0, "rtol %g", tol.rtol);
                    FZ_REQUIRE(!isnan(tol.max_kl), "max_kl NaN");
                }
        qc_policy_free(p);
    } else {
        FZ_REQUIRE(p == NULL, "error left a policy behind");
    }
    free(buf);
    return 0;
}
