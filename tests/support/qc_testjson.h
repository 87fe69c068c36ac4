/* qc_testjson.h — JSON edits for config tests (test support).
 * qc_test_json_edit: apply one "a.b.c=JSON" (set, creating objects on the way) or "a.b.c"
 * (delete) edit to root, in place; a value that is not JSON fails the running Check test. */
#ifndef QC_TESTJSON_H
#define QC_TESTJSON_H

#include <cjson/cJSON.h>

void qc_test_json_edit(cJSON *root, const char *edit);

#endif /* QC_TESTJSON_H */
