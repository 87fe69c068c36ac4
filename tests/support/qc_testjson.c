/* qc_testjson.c — see qc_testjson.h. */
#include "qc_testjson.h"

#include <stdio.h>
#include <string.h>

#include <check.h>

void qc_test_json_edit(cJSON *root, const char *edit) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", edit);
    char *eq = strchr(buf, '=');
    if (eq) *eq = '\0';
    cJSON *obj = root;
    char *key = buf, *dot;
    while ((dot = strchr(key, '.')) != NULL) {
        *dot = '\0';
        cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!next) next = cJSON_AddObjectToObject(obj, key);
        obj = next;
        key = dot + 1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    if (eq) {
        cJSON *v = cJSON_Parse(eq + 1);
        ck_assert_msg(v != NULL, "bad edit value %s", eq + 1);
        cJSON_AddItemToObject(obj, key, v);
    }
}
