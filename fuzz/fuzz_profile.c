/* fuzz_profile.c — libFuzzer target for the export-profile JSON parser (qc_profile_parse).
 * Input: the profile file's bytes (not NUL-terminated: the parser takes a length).
 * Checks: no crash / leak / UB; errors name the file; on success the profile is usable:
 * 0/1 flags, 1 <= max_seq_len, max_context_len <= 2^30, and qc_profile_mode agrees. */
#include <stdint.h>

#include "fuzz_common.h"
#include "qc/qc_prefill.h"

#define FZ_PATH "fuzz/profile.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fz_copy(data, size);
    qc_profile p;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_profile_parse((const char *)buf, size, FZ_PATH, &p, &err);
    fz_check_error(st, &err, FZ_PATH);
    if (st == QC_OK) {
        FZ_REQUIRE(p.enable_dynamic_shape == 0 || p.enable_dynamic_shape == 1, "dynamic flag");
        FZ_REQUIRE(p.use_kv_cache == 0 || p.use_kv_cache == 1, "kv flag");
        FZ_REQUIRE(p.max_seq_len >= 1 && p.max_seq_len <= (1 << 30), "max_seq_len %d",
                   p.max_seq_len);
        FZ_REQUIRE(p.max_context_len >= 1 && p.max_context_len <= (1 << 30),
                   "max_context_len %d", p.max_context_len);
        qc_mode m = qc_profile_mode(&p);
        FZ_REQUIRE(m == (!p.use_kv_cache ? QC_MODE_NOKV
                         : p.enable_dynamic_shape ? QC_MODE_DYNAMIC : QC_MODE_STATIC),
                   "mode %d", (int)m);
    }
    free(buf);
    return 0;
}
