/* qc_kv.h — the one splitter of comma-separated option lists in a spec: "k=v[,k=v...]" (the
 * options of `--backend optimized,bf16_dot=1`, `--backend http:URL,k=5`) and "name[,name...]"
 * (`--require hidden,threads`).
 *
 * Syntax (what every harness site accepted before this helper existed; no site changes it):
 *   - items are separated by ','; empty items (",,", a leading or a trailing ',') are skipped;
 *   - no quoting, no escapes, no blanks trimmed: an item is its bytes between the commas, so a
 *     value cannot hold a ',' and a quote is an ordinary character;
 *   - a key=value item is split at its FIRST '=': the value may be empty and may hold more '='
 *     ("a==b" is key "a", value "=b"); an empty key ("=v") is handed to the caller as "", whose
 *     own unknown-key check names it;
 *   - the whole spec has at most QC_KV_MAX_LEN - 1 bytes.
 *
 * Use (the caller owns the qc_kv, typically on its stack; nothing is allocated):
 *   qc_kv kv;
 *   char *k, *v;
 *   qc_status s = qc_kv_init(&kv, spec, "--backend http", err);
 *   while (!s && !(s = qc_kv_pair(&kv, &k, &v, err)) && k) ...use k, v...;
 * Items and keys / values point into kv.buf: valid while kv lives, writable (the caller may
 * cut them further). Messages name the spec (`what`) and the offending item, e.g.
 *   "--backend http: option 'k5' is not key=value".
 */
#ifndef QC_KV_H
#define QC_KV_H

#include <stddef.h>

#include "qc/qc_status.h"

#define QC_KV_MAX_LEN 2048 /* a spec's buffer: its length + 1 (the NUL) */

typedef struct {
    char buf[QC_KV_MAX_LEN]; /* a copy of the spec; items are cut out of it in place */
    char *next;              /* where the next item starts (NULL: the list is exhausted) */
    const char *what;        /* the spec's name for messages, "--backend http" (borrowed: must
                                outlive kv) */
} qc_kv;

/* Start splitting spec (NULL: the empty list). QC_OK; QC_ERR_ARG "<what>: too long (N bytes,
 * at most M)" when spec does not fit (kv is then the empty list). */
qc_status qc_kv_init(qc_kv *kv, const char *spec, const char *what, qc_err *err);

/* The next non-empty item, whole (NUL-terminated, in kv->buf), or NULL at the end. */
char *qc_kv_item(qc_kv *kv);

/* The next non-empty item as key=value: QC_OK with *key, *value set; QC_OK with *key and
 * *value NULL at the end; QC_ERR_ARG "<what>: option '<item>' is not key=value" for an item
 * without '=' (*key, *value NULL; the items after it stay unread). */
qc_status qc_kv_pair(qc_kv *kv, char **key, char **value, qc_err *err);

#endif /* QC_KV_H */
