/* qc_kv.c — the comma-separated option lists of a spec (contract: qc_kv.h). */
#include "qc_kv.h"

#include <stdio.h>
#include <string.h>

qc_status qc_kv_init(qc_kv *kv, const char *spec, const char *what, qc_err *err) {
    kv->what = what ? what : "option list";
    kv->buf[0] = '\0';
    kv->next = NULL;
    if (!spec) return QC_OK;
    const size_t n = strlen(spec);
    if (n >= sizeof kv->buf)
        return qc_errf(err, QC_ERR_ARG, "%s: too long (%zu bytes, at most %zu)", kv->what, n,
                       sizeof kv->buf - 1);
    memcpy(kv->buf, spec, n + 1);
    kv->next = kv->buf;
    return QC_OK;
}

char *qc_kv_item(qc_kv *kv) {
    char *p = kv->next;
    while (p && *p == ',') p++; /* empty items */
    if (!p || !*p) {
        kv->next = NULL;
        return NULL;
    }
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    kv->next = comma ? comma + 1 : NULL;
    return p;
}

qc_status qc_kv_pair(qc_kv *kv, char **key, char **value, qc_err *err) {
    *key = *value = NULL;
    char *item = qc_kv_item(kv);
    if (!item) return QC_OK;
    char *eq = strchr(item, '=');
    if (!eq) {
        kv->next = NULL;
        return qc_errf(err, QC_ERR_ARG, "%s: option '%s' is not key=value", kv->what, item);
    }
    *eq = '\0';
    *key = item;
    *value = eq + 1;
    return QC_OK;
}
