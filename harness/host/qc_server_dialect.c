/* qc_server_dialect.c — request bodies and answer parsing of the four dialects (qc_server.h).
 *
 * Facts each dialect relies on (sources in docs/servers.md):
 *   vllm   prompt_logprobs is a list with null first, then per position a dict keyed by the
 *          token id holding {"logprob","rank",...} (the prompt's own token with its rank, and the
 *          top-k); the generated tokens' top_logprobs are dicts keyed "token_id:N" when
 *          return_tokens_as_token_ids is set; -inf comes back as -9999.0; a request with
 *          prompt_logprobs does not read the prefix cache; cache_salt partitions it.
 *   sglang meta_info.input_top_logprobs[j] / output_top_logprobs[i] are lists of
 *          [logprob, token_id, text]; entry j of the input list is the prediction of input token
 *          logprob_start_len + j; cached_tokens in meta_info.
 *   llama-server  completion_probabilities[i] = {id, logprob, top_logprobs: [{id, logprob}]};
 *          timings.cache_n = prompt tokens taken from the slot's cache.
 *   openai (generic)  choices[0].logprobs: content[] as llama-server's, or top_logprobs dicts.
 */
#include "qc_server_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first problem found is the evidence (later ones are consequences). */
static void fail(qc_score *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(qc_score *sc, const char *fmt, ...) {
    if (sc->fail[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sc->fail, sizeof sc->fail, fmt, ap);
    va_end(ap);
}

int qcs_alloc(const qc_server *s, qc_score *sc, int rows) {
    int k = s->o.k;
    sc->rows = rows;
    sc->k = k;
    size_t ne = (size_t)(rows > 0 ? rows : 1) * (size_t)k;
    sc->ids = malloc(ne * sizeof *sc->ids);
    sc->lps = malloc(ne * sizeof *sc->lps);
    sc->gen = calloc((size_t)(sc->n_gen > 0 ? sc->n_gen : 1), sizeof *sc->gen);
    if (!sc->ids || !sc->lps || !sc->gen) {
        snprintf(sc->fail, sizeof sc->fail, "out of memory for %d rows", rows);
        return -1;
    }
    for (size_t i = 0; i < ne; i++) {
        sc->ids[i] = -1;
        sc->lps[i] = -INFINITY;
    }
    return 0;
}

int qcs_put(const qc_server *s, qc_score *sc, int r, int j, double id, double lp,
            const char *field) {
    if (!(id >= 0 && id < s->vocab) || id != floor(id)) {
        char b[200];
        snprintf(b, sizeof b, "%s: token id %.17g outside the vocabulary [0, %d)", field, id,
                 s->vocab);
        fail(sc, "%s", b);
        return -1;
    }
    if (!isfinite(lp) || lp > 1e-3) {
        char b[200];
        snprintf(b, sizeof b, "%s: log-probability %.9g of token %d is not a finite value <= 0",
                 field, lp, (int)id);
        fail(sc, "%s", b);
        return -1;
    }
    if (r < 0 || r >= sc->rows || j < 0 || j >= sc->k) return 0; /* more than asked: ignored */
    sc->ids[(size_t)r * (size_t)sc->k + (size_t)j] = (int32_t)id;
    sc->lps[(size_t)r * (size_t)sc->k + (size_t)j] = (float)lp;
    return 0;
}

void qcs_sort_rows(qc_score *sc) {
    for (int r = 0; r < sc->rows; r++) {
        int32_t *id = sc->ids + (size_t)r * (size_t)sc->k;
        float *lp = sc->lps + (size_t)r * (size_t)sc->k;
        for (int i = 1; i < sc->k; i++) /* insertion sort: k is small */
            for (int j = i; j > 0; j--) {
                int later = id[j - 1] < 0 ||
                            (id[j] >= 0 && (lp[j] > lp[j - 1] ||
                                            (lp[j] == lp[j - 1] && id[j] < id[j - 1])));
                if (!later) break;
                int32_t ti = id[j]; id[j] = id[j - 1]; id[j - 1] = ti;
                float tl = lp[j]; lp[j] = lp[j - 1]; lp[j - 1] = tl;
            }
    }
}

const char *qcs_path(const qc_server *s) {
    switch (s->api) {
    case QC_API_SGLANG: return "/generate";
    case QC_API_LLAMA: return "/completion";
    default: return "/v1/completions";
    }
}

static cJSON *id_array(const int32_t *seq, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *v = cJSON_CreateNumber(seq[i]);
        if (!v) { cJSON_Delete(a); return NULL; }
        cJSON_AddItemToArray(a, v);
    }
    return a;
}

char *qcs_body(qc_server *s, const qc_score *sc) {
    cJSON *b = cJSON_CreateObject();
    if (!b) return NULL;
    cJSON *prompt = id_array(sc->seq, sc->n);
    if (!prompt) { cJSON_Delete(b); return NULL; }
    int k = s->o.k;
    int want_prompt = sc->from < sc->n - 1 || sc->prompt_logprobs;
    if (s->api == QC_API_SGLANG) {
        cJSON_AddItemToObject(b, "input_ids", prompt);
        cJSON *sp = cJSON_AddObjectToObject(b, "sampling_params");
        cJSON_AddNumberToObject(sp, "max_new_tokens", sc->n_gen);
        cJSON_AddNumberToObject(sp, "temperature", 0);
        cJSON_AddBoolToObject(sp, "ignore_eos", 1);
        cJSON_AddBoolToObject(b, "return_logprob", 1);
        cJSON_AddNumberToObject(b, "logprob_start_len", want_prompt ? sc->from : -1);
        cJSON_AddNumberToObject(b, "top_logprobs_num", k);
    } else if (s->api == QC_API_LLAMA) {
        cJSON_AddItemToObject(b, "prompt", prompt);
        cJSON_AddNumberToObject(b, "n_predict", sc->n_gen);
        cJSON_AddNumberToObject(b, "n_probs", k);
        cJSON_AddBoolToObject(b, "cache_prompt", !sc->cold);
        cJSON_AddNumberToObject(b, "temperature", 0);
        cJSON_AddBoolToObject(b, "return_tokens", 1);
        if (!sc->ids_only) {
            /* scoring: the anchor is sampled at every step so each step's log-probabilities
             * are reported (raw); a greedy run (ids_only) is left alone, end-of-sequence
             * included (the server's vocabulary decides it, not the config) */
            cJSON_AddBoolToObject(b, "ignore_eos", 1);
            if (s->anchor >= 0) {
                cJSON *lb = cJSON_AddArrayToObject(b, "logit_bias");
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateNumber(s->anchor));
                cJSON_AddItemToArray(pair, cJSON_CreateNumber(1000));
                cJSON_AddItemToArray(lb, pair);
            }
        }
    } else {
        if (s->o.model[0]) cJSON_AddStringToObject(b, "model", s->o.model);
        cJSON_AddItemToObject(b, "prompt", prompt);
        cJSON_AddNumberToObject(b, "max_tokens", sc->n_gen);
        cJSON_AddNumberToObject(b, "temperature", 0);
        cJSON_AddNumberToObject(b, "logprobs", k);
        if (s->api == QC_API_VLLM) {
            cJSON_AddBoolToObject(b, "ignore_eos", 1);
            cJSON_AddBoolToObject(b, "return_tokens_as_token_ids", 1);
            cJSON_AddBoolToObject(b, "return_token_ids", 1);
            if (want_prompt) cJSON_AddNumberToObject(b, "prompt_logprobs", k);
            if (sc->cold) {
                char salt[64];
                snprintf(salt, sizeof salt, "qc-cold-%ld-%ld", (long)getpid(),
                         ++s->cold_counter);
                cJSON_AddStringToObject(b, "cache_salt", salt);
            }
        }
    }
    char *txt = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return txt;
}

/* ---- shared readers -------------------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *key) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

/* "token_id:N" (vLLM with return_tokens_as_token_ids) or "N" -> N; -1 otherwise. */
static double key_id(const char *key) {
    if (!strncmp(key, "token_id:", 9)) key += 9;
    if (!*key) return -1;
    char *end;
    double v = strtod(key, &end);
    return *end ? -1 : v;
}

/* A dict {"token_id:N" | "N": logprob | {"logprob": x, "rank": r}} into row r. */
static int put_dict(const qc_server *s, qc_score *sc, int r, const cJSON *d, const char *field,
                    int by_rank) {
    if (!cJSON_IsObject(d)) {
        fail(sc, "%s: not an object", field);
        return -1;
    }
    int j = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, d) {
        double id = key_id(e->string);
        if (id < 0) {
            char b[160];
            snprintf(b, sizeof b, "%s: key '%.40s' is not a token id (the server returns token "
                     "strings: ask for ids, e.g. vLLM's return_tokens_as_token_ids)", field,
                     e->string);
            fail(sc, "%s", b);
            return -1;
        }
        double lp;
        if (cJSON_IsNumber(e)) {
            lp = e->valuedouble;
        } else {
            const cJSON *l = get(e, "logprob"), *rk = get(e, "rank");
            if (!cJSON_IsNumber(l)) {
                fail(sc, "%s: an entry without a numeric logprob", field);
                return -1;
            }
            lp = l->valuedouble;
            if (by_rank && cJSON_IsNumber(rk) && rk->valuedouble > sc->k) continue;
        }
        if (j >= sc->k) {  /* k+1 entries (the sampled token): keep the best k after sorting */
            int worst = 0;
            const float *row = sc->lps + (size_t)r * (size_t)sc->k;
            for (int q = 1; q < sc->k; q++) if (row[q] < row[worst]) worst = q;
            if (lp <= row[worst]) continue;
            if (qcs_put(s, sc, r, worst, id, lp, field)) return -1;
            continue;
        }
        if (qcs_put(s, sc, r, j++, id, lp, field)) return -1;
    }
    return 0;
}

/* A list [{id, logprob}...] (llama-server) or [[logprob, id, text]...] (sglang) into row r. */
static int put_list(const qc_server *s, qc_score *sc, int r, const cJSON *a, const char *field) {
    if (!cJSON_IsArray(a)) {
        fail(sc, "%s: not a list", field);
        return -1;
    }
    int j = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        double id, lp;
        if (cJSON_IsArray(e)) {
            const cJSON *l = cJSON_GetArrayItem(e, 0), *i = cJSON_GetArrayItem(e, 1);
            if (!cJSON_IsNumber(l) || !cJSON_IsNumber(i)) {
                fail(sc, "%s: an entry is not [logprob, token_id, ...]", field);
                return -1;
            }
            lp = l->valuedouble;
            id = i->valuedouble;
        } else {
            const cJSON *i = get(e, "id"), *l = get(e, "logprob");
            if (!cJSON_IsNumber(i) || !cJSON_IsNumber(l)) {
                fail(sc, "%s: an entry without numeric id and logprob", field);
                return -1;
            }
            id = i->valuedouble;
            lp = l->valuedouble;
        }
        if (qcs_put(s, sc, r, j++, id, lp, field)) return -1;
    }
    return 0;
}

static int put_gen(const qc_server *s, qc_score *sc, int i, double id, const char *field) {
    if (!(id >= 0 && id < s->vocab) || id != floor(id)) {
        char b[160];
        snprintf(b, sizeof b, "%s[%d]: generated token id %.17g outside [0, %d)", field, i, id,
                 s->vocab);
        fail(sc, "%s", b);
        return -1;
    }
    if (i < sc->n_gen) sc->gen[i] = (int32_t)id;
    return 0;
}

/* The number of generated tokens an answer holds must be what was asked. */
static int check_gen_count(qc_score *sc, int got, const char *field) {
    sc->n_gen_got = got < sc->n_gen ? got : sc->n_gen;
    if (sc->ids_only && got > 0 && got < sc->n_gen) return 0; /* stopped early: the caller says */
    if (got != sc->n_gen) {
        char b[200];
        snprintf(b, sizeof b, "%s: %d generated tokens, %d asked (max tokens with the "
                 "end-of-sequence ignored)", field, got, sc->n_gen);
        fail(sc, "%s", b);
        return -1;
    }
    return 0;
}

/* ---- per dialect ----------------------------------------------------------------------- */

static int parse_vllm_prompt(const qc_server *s, const cJSON *ch, qc_score *sc) {
    int np = sc->n - 1 - sc->from; /* prompt rows: positions from .. n-2 */
    if (np <= 0) return 0;
    const cJSON *pl = get(ch, "prompt_logprobs");
    if (!cJSON_IsArray(pl) || cJSON_GetArraySize(pl) != sc->n) {
        fail(sc, "choices[0].prompt_logprobs: missing or not a list of %d entries (one per "
             "prompt token)", sc->n);
        return -1;
    }
    for (int p = sc->from; p < sc->n - 1; p++) {
        char f[64];
        snprintf(f, sizeof f, "choices[0].prompt_logprobs[%d]", p + 1);
        if (put_dict(s, sc, p - sc->from, cJSON_GetArrayItem(pl, p + 1), f, 1)) return -1;
    }
    return 0;
}

/* openai / vllm: choices[0].logprobs as top_logprobs dicts or llama-server's content[]. */
static int parse_openai(const qc_server *s, const cJSON *root, qc_score *sc) {
    const cJSON *chs = get(root, "choices");
    const cJSON *ch = cJSON_GetArrayItem(chs, 0);
    if (!cJSON_IsObject(ch)) {
        fail(sc, "choices: missing or empty");
        return -1;
    }
    if (parse_vllm_prompt(s, ch, sc)) return -1;
    int base = sc->n - 1 - sc->from;
    const cJSON *lpo = get(ch, "logprobs");
    const cJSON *content = get(lpo, "content"), *top = get(lpo, "top_logprobs");
    if (cJSON_IsArray(content)) {
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, content) {
            char f[64];
            snprintf(f, sizeof f, "choices[0].logprobs.content[%d]", i);
            const cJSON *id = get(e, "id");
            if (!cJSON_IsNumber(id)) { fail(sc, "%s.id: missing", f); return -1; }
            if (put_gen(s, sc, i, id->valuedouble, f)) return -1;
            if (put_list(s, sc, base + i, get(e, "top_logprobs"), f)) return -1;
            i++;
        }
        return check_gen_count(sc, i, "choices[0].logprobs.content");
    }
    if (!cJSON_IsArray(top)) {
        fail(sc, "choices[0].logprobs: neither content[] nor top_logprobs[]");
        return -1;
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, top) {
        char f[64];
        snprintf(f, sizeof f, "choices[0].logprobs.top_logprobs[%d]", i);
        if (put_dict(s, sc, base + i, e, f, 0)) return -1;
        i++;
    }
    /* generated ids: token_ids (vLLM return_token_ids), else tokens "token_id:N" */
    const cJSON *tid = get(ch, "token_ids"), *toks = get(lpo, "tokens");
    int g = 0;
    if (cJSON_IsArray(tid)) {
        cJSON_ArrayForEach(e, tid) {
            if (!cJSON_IsNumber(e) || put_gen(s, sc, g, e->valuedouble, "choices[0].token_ids")) {
                fail(sc, "choices[0].token_ids: not a list of ids");
                return -1;
            }
            g++;
        }
    } else if (cJSON_IsArray(toks)) {
        cJSON_ArrayForEach(e, toks) {
            double id = cJSON_IsString(e) ? key_id(e->valuestring) : -1;
            if (id < 0 || put_gen(s, sc, g, id, "choices[0].logprobs.tokens")) {
                fail(sc, "choices[0].logprobs.tokens: not token ids (ask for ids, e.g. vLLM's "
                     "return_tokens_as_token_ids)");
                return -1;
            }
            g++;
        }
    } else {
        fail(sc, "choices[0]: no token_ids and no logprobs.tokens");
        return -1;
    }
    if (i != g) {
        fail(sc, "choices[0].logprobs.top_logprobs: %d entries for %d generated tokens", i, g);
        return -1;
    }
    const cJSON *cached = get(get(get(root, "usage"), "prompt_tokens_details"), "cached_tokens");
    if (cJSON_IsNumber(cached)) sc->cached = (long)cached->valuedouble;
    return check_gen_count(sc, g, "choices[0]");
}

static int parse_sglang(const qc_server *s, const cJSON *root, qc_score *sc) {
    if (cJSON_IsArray(root)) root = cJSON_GetArrayItem(root, 0);
    const cJSON *mi = get(root, "meta_info");
    if (!cJSON_IsObject(mi)) {
        fail(sc, "meta_info: missing");
        return -1;
    }
    int np = sc->n - 1 - sc->from;
    if (np > 0) {
        const cJSON *in = get(mi, "input_top_logprobs");
        if (!cJSON_IsArray(in) || cJSON_GetArraySize(in) != sc->n - sc->from) {
            char b[160];
            snprintf(b, sizeof b, "meta_info.input_top_logprobs: missing or not %d entries "
                     "(logprob_start_len %d of %d prompt tokens)", sc->n - sc->from, sc->from,
                     sc->n);
            fail(sc, "%s", b);
            return -1;
        }
        for (int p = sc->from; p < sc->n - 1; p++) {
            char f[64];
            snprintf(f, sizeof f, "meta_info.input_top_logprobs[%d]", p + 1 - sc->from);
            if (put_list(s, sc, p - sc->from, cJSON_GetArrayItem(in, p + 1 - sc->from), f))
                return -1;
        }
    }
    const cJSON *out = get(mi, "output_top_logprobs"), *oid = get(root, "output_ids");
    if (!cJSON_IsArray(out)) {
        fail(sc, "meta_info.output_top_logprobs: missing");
        return -1;
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, out) {
        char f[64];
        snprintf(f, sizeof f, "meta_info.output_top_logprobs[%d]", i);
        if (put_list(s, sc, np + i, e, f)) return -1;
        i++;
    }
    int g = 0;
    if (cJSON_IsArray(oid)) {
        cJSON_ArrayForEach(e, oid) {
            if (!cJSON_IsNumber(e) || put_gen(s, sc, g, e->valuedouble, "output_ids")) {
                fail(sc, "output_ids: not a list of token ids");
                return -1;
            }
            g++;
        }
    } else {
        const cJSON *otl = get(mi, "output_token_logprobs");
        cJSON_ArrayForEach(e, otl) {
            const cJSON *id = cJSON_GetArrayItem(e, 1);
            if (!cJSON_IsNumber(id) || put_gen(s, sc, g, id->valuedouble, "output_token_logprobs"))
                return -1;
            g++;
        }
    }
    if (i != g) {
        fail(sc, "meta_info.output_top_logprobs: %d entries for %d generated tokens", i, g);
        return -1;
    }
    const cJSON *cached = get(mi, "cached_tokens");
    if (cJSON_IsNumber(cached)) sc->cached = (long)cached->valuedouble;
    return check_gen_count(sc, g, "output_ids");
}

static int parse_llama(const qc_server *s, const cJSON *root, qc_score *sc) {
    const cJSON *cache_n = get(get(root, "timings"), "cache_n");
    if (cJSON_IsNumber(cache_n)) sc->cached = (long)cache_n->valuedouble;
    const cJSON *toks = get(root, "tokens"), *e;
    int g = 0;
    if (cJSON_IsArray(toks) && cJSON_GetArraySize(toks) > 0) { /* return_tokens */
        cJSON_ArrayForEach(e, toks) {
            if (!cJSON_IsNumber(e) || put_gen(s, sc, g, e->valuedouble, "tokens")) {
                fail(sc, "tokens: not a list of token ids");
                return -1;
            }
            g++;
        }
    }
    if (sc->ids_only) {
        sc->n_gen_got = g < sc->n_gen ? g : sc->n_gen;
        if (g == 0) fail(sc, "tokens: no generated token ids (return_tokens)");
        return g == 0 ? -1 : 0;
    }
    const cJSON *cp = get(root, "completion_probabilities");
    if (!cJSON_IsArray(cp)) {
        fail(sc, "completion_probabilities: missing (n_probs unsupported, or the generated "
                 "token's text is a cut UTF-8 sequence)");
        return -1;
    }
    int i = 0;
    cJSON_ArrayForEach(e, cp) {
        char f[64];
        snprintf(f, sizeof f, "completion_probabilities[%d]", i);
        const cJSON *id = get(e, "id");
        if (!cJSON_IsNumber(id)) { fail(sc, "%s.id: missing", f); return -1; }
        if (g == 0 && put_gen(s, sc, i, id->valuedouble, f)) return -1;
        if (put_list(s, sc, i, get(e, "top_logprobs"), f)) return -1;
        i++;
    }
    if (g && g != i) {
        fail(sc, "completion_probabilities: %d entries for %d generated tokens (entries "
                 "are omitted for tokens whose text is a cut UTF-8 sequence)", i, g);
        return -1;
    }
    return check_gen_count(sc, i, "completion_probabilities");
}

int qcs_parse(const qc_server *s, const cJSON *root, qc_score *sc) {
    int rows = sc->n - 1 - sc->from + (sc->ids_only ? 0 : sc->n_gen);
    if (qcs_alloc(s, sc, rows)) return -1;
    int rc;
    switch (s->api) {
    case QC_API_SGLANG: rc = parse_sglang(s, root, sc); break;
    case QC_API_LLAMA: rc = parse_llama(s, root, sc); break;
    default: rc = parse_openai(s, root, sc); break;
    }
    if (rc) return -1;
    /* every row must hold k entries (a server with fewer than k tokens in its vocabulary
     * aside: never the case for a Qwen3.5 model) */
    for (int r = 0; r < sc->rows; r++)
        for (int j = 0; j < sc->k; j++)
            if (sc->ids[(size_t)r * (size_t)sc->k + (size_t)j] < 0) {
                char b[160];
                snprintf(b, sizeof b, "position %d: %d of the %d top log-probabilities asked",
                         sc->from + r, j, sc->k);
                fail(sc, "%s", b);
                return -1;
            }
    qcs_sort_rows(sc);
    return 0;
}
