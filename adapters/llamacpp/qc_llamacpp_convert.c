/* qc_llamacpp_convert.c — open options and the GGUF conversion cache
 * (part of the llama.cpp plugin: see qc_llamacpp_internal.h) */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are bounded by PATH_MAX_ */
#include "qc_llamacpp_internal.h"

/* ===================================================================================== */
/* options                                                                               */
/* ===================================================================================== */

int parse_int(const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

int parse_options(qc_llama *h, const char *options) {
    snprintf(h->outtype, sizeof h->outtype, "f32");
    snprintf(h->mtp, sizeof h->mtp, "auto");
    h->kv_f16 = 0;
    h->flash = 0;
    /* 1 thread by default: ggml's CPU threads spin-wait at every graph barrier, and on a
     * loaded 2-vCPU machine 2 threads ran a tiny model ~300x slower than 1 (measured) */
    h->threads = 1;
    h->n_ctx = 4096;
    h->want_hidden = 1;
    h->want_state = 1;
    h->poll = 0;
    h->guard = 1;
    h->n_seqs = 1;
    h->rs_seq = 0;
    h->snap_partial = 0;
    h->want_fill = 1;
    h->reconvert = 0;
    if (!options || !options[0]) return QC_PLUGIN_OK;
    char buf[8192];
    if (strlen(options) >= sizeof buf) return set_err(NULL, QC_PLUGIN_ERROR, "options too long");
    snprintf(buf, sizeof buf, "%s", options);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) return set_err(NULL, QC_PLUGIN_UNSUPPORTED, "option '%s': expected key=value", kv);
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        int bad = 0;
        if (!strcmp(k, "gguf")) {
            if (!v[0] || strlen(v) >= sizeof h->gguf) bad = 1;
            else snprintf(h->gguf, sizeof h->gguf, "%s", v);
        } else if (!strcmp(k, "outtype")) {
            if (strcmp(v, "f32") && strcmp(v, "bf16") && strcmp(v, "f16")) bad = 1;
            else snprintf(h->outtype, sizeof h->outtype, "%s", v);
        } else if (!strcmp(k, "mtp")) {
            if (strcmp(v, "auto") && strcmp(v, "keep") && strcmp(v, "drop")) bad = 1;
            else snprintf(h->mtp, sizeof h->mtp, "%s", v);
        } else if (!strcmp(k, "kv")) {
            if (!strcmp(v, "f32")) h->kv_f16 = 0;
            else if (!strcmp(v, "f16")) h->kv_f16 = 1;
            else bad = 1;
        } else if (!strcmp(k, "flash_attn")) {
            bad = parse_int(v, 0, 1, &h->flash);
        } else if (!strcmp(k, "threads")) {
            bad = parse_int(v, 1, 512, &h->threads);
        } else if (!strcmp(k, "n_ctx")) {
            bad = parse_int(v, 16, 1 << 20, &h->n_ctx);
        } else if (!strcmp(k, "hidden")) {
            bad = parse_int(v, 0, 1, &h->want_hidden);
        } else if (!strcmp(k, "state")) {
            bad = parse_int(v, 0, 1, &h->want_state);
        } else if (!strcmp(k, "poll")) {
            bad = parse_int(v, 0, 100, &h->poll);
        } else if (!strcmp(k, "guard")) {
            bad = parse_int(v, 0, 1, &h->guard);
        } else if (!strcmp(k, "reconvert")) {
            bad = parse_int(v, 0, 1, &h->reconvert);
        } else if (!strcmp(k, "fix_mrope")) {
            bad = parse_int(v, 0, 1, &h->fix_mrope);
        } else if (!strcmp(k, "seqs")) {
            bad = parse_int(v, 1, QC_LLAMACPP_MAX_SEQS, &h->n_seqs);
        } else if (!strcmp(k, "rs_seq")) {
            bad = parse_int(v, 0, 64, &h->rs_seq);
        } else if (!strcmp(k, "snap")) {
            if (!strcmp(v, "full")) h->snap_partial = 0;
            else if (!strcmp(v, "partial")) h->snap_partial = 1;
            else bad = 1;
        } else if (!strcmp(k, "fill")) {
            bad = parse_int(v, 0, 1, &h->want_fill);
        } else {
            return set_err(NULL, QC_PLUGIN_UNSUPPORTED,
                           "unknown option '%s' (gguf, outtype, mtp, kv, flash_attn, threads, "
                           "n_ctx, hidden, state, poll, guard, reconvert, fix_mrope, seqs, rs_seq, snap, fill)", k);
        }
        if (bad) return set_err(NULL, QC_PLUGIN_UNSUPPORTED, "option %s=%s: invalid value", k, v);
    }
    return QC_PLUGIN_OK;
}


/* ===================================================================================== */
/* conversion cache                                                                      */
/* ===================================================================================== */

typedef struct { uint64_t h; } fnv;
static void fnv_init(fnv *f) { f->h = 1469598103934665603ULL; }
static void fnv_add(fnv *f, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        f->h ^= b[i];
        f->h *= 1099511628211ULL;
    }
}
static void fnv_str(fnv *f, const char *s) { fnv_add(f, s, strlen(s) + 1); }

/* Hash a file's bytes (and its length); -1 when it cannot be read. */
static int fnv_file(fnv *f, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    static uint8_t buf[1 << 16];
    size_t k;
    uint64_t total = 0;
    while ((k = fread(buf, 1, sizeof buf, fp)) > 0) {
        fnv_add(f, buf, k);
        total += k;
    }
    int e = ferror(fp);
    fclose(fp);
    fnv_add(f, &total, sizeof total);
    return e ? -1 : 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* key = hash(model files: config.json, *.safetensors, *.index.json, sorted; qc_convert.py;
 * tag; outtype; mtp) */
static int model_key(qc_llama *h, const char *model_dir, char *key, size_t n) {
    DIR *d = opendir(model_dir);
    if (!d) return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s: %s", model_dir, strerror(errno));
    char *names[4096];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 4096) {
        if (!strcmp(e->d_name, "config.json") || ends_with(e->d_name, ".safetensors") ||
            ends_with(e->d_name, ".index.json"))
            names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
    fnv f;
    fnv_init(&f);
    int rc = QC_PLUGIN_OK;
    char path[PATH_MAX_];
    for (int i = 0; i < nn; i++) {
        fnv_str(&f, names[i]);
        snprintf(path, sizeof path, "%s/%s", model_dir, names[i]);
        if (fnv_file(&f, path) != 0 && rc == QC_PLUGIN_OK)
            rc = set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: cannot read %s", path);
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    if (rc) return rc;
    if (nn == 0) return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s has no config.json / *.safetensors", model_dir);
    const char *conv = getenv("QC_LLAMACPP_CONVERT");
    if (!conv || !conv[0]) conv = QC_LLAMACPP_CONVERT;
    if (fnv_file(&f, conv) != 0)
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: cannot read the converter wrapper %s", conv);
    fnv_str(&f, QC_LLAMACPP_TAG);
    fnv_str(&f, h->outtype);
    fnv_str(&f, h->mtp);
    fnv_str(&f, h->fix_mrope ? "mrope=auto" : "mrope=stock");
    snprintf(key, n, "%016llx-%s%s", (unsigned long long)f.h, h->outtype, h->fix_mrope ? "-mrope" : "");
    return QC_PLUGIN_OK;
}

static void cache_dir(char *out, size_t n) {
    const char *c = getenv("QC_CACHE");
    const char *x = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (c && c[0]) snprintf(out, n, "%s/llamacpp", c);
    else if (x && x[0]) snprintf(out, n, "%s/qwen-conform/llamacpp", x);
    else if (QC_LLAMACPP_CACHE[0]) snprintf(out, n, "%s", QC_LLAMACPP_CACHE);
    else snprintf(out, n, "%s/.cache/qwen-conform/llamacpp", home ? home : "/tmp");
}

static int mkdir_p(const char *path) {
    char tmp[PATH_MAX_];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* The last `nlines` non-empty lines of a text file, joined with " | ". */
static void file_tail(const char *path, char *out, size_t n, int nlines) {
    out[0] = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return;
    static char buf[1 << 16];
    if (fseek(fp, 0, SEEK_END) == 0) {
        long sz = ftell(fp);
        long off = sz > (long)sizeof buf - 1 ? sz - (long)sizeof buf + 1 : 0;
        fseek(fp, off, SEEK_SET);
    }
    size_t k = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[k] = 0;
    /* the converter's progress bars use \r: treat as newlines */
    for (size_t i = 0; i < k; i++)
        if (buf[i] == '\r') buf[i] = '\n';
    size_t end = k;
    while (end > 0 && (buf[end - 1] == '\n' || buf[end - 1] == ' ')) end--;
    size_t b = end;
    int got = 0;
    while (b > 0 && got < nlines) {
        size_t e = b;
        while (b > 0 && buf[b - 1] != '\n') b--;
        if (e > b) got++;
        if (b > 0 && got < nlines) b--;
    }
    size_t o = 0;
    for (size_t i = b; i < end && o + 4 < n; i++) {
        if (buf[i] == '\n') {
            if (o > 0 && out[o - 1] != ' ') {
                out[o++] = ' ';
                out[o++] = '|';
                out[o++] = ' ';
            }
        } else {
            out[o++] = buf[i];
        }
    }
    out[o] = 0;
}

/* The converter's reason: the last Python exception line ("ValueError: ...") or logged
 * error ("ERROR:hf-to-gguf:..."), else the last line. */
static void file_reason(const char *path, char *out, size_t n) {
    out[0] = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return;
    char line[4096];
    char last[4096] = "";
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        const char *c = strstr(line, ": ");
        int exc = 0;
        if (c && c > line && line[0] != ' ') {
            /* a dotted identifier ending in Error / Exception / Interrupt before ": " */
            size_t k = (size_t)(c - line);
            int ident = 1;
            for (size_t i = 0; i < k; i++)
                if (!(line[i] == '.' || line[i] == '_' || (line[i] >= 'a' && line[i] <= 'z') ||
                      (line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= '0' && line[i] <= '9'))) ident = 0;
            if (ident && ((k >= 5 && !strncmp(c - 5, "Error", 5)) || (k >= 9 && !strncmp(c - 9, "Exception", 9))))
                exc = 1;
        }
        if (exc || !strncmp(line, "ERROR:", 6)) snprintf(out, n, "%s", line);
        if (line[0]) snprintf(last, sizeof last, "%s", line);
    }
    fclose(fp);
    if (!out[0]) snprintf(out, n, "%s", last);
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Convert model_dir (or reuse the cache) -> gguf path in out. */
int convert_model(qc_llama *h, const char *model_dir, char *out, size_t n) {
    char key[64], dir[PATH_MAX_], cdir[PATH_MAX_];
    int rc = model_key(h, model_dir, key, sizeof key);
    if (rc) return rc;
    cache_dir(cdir, sizeof cdir);
    snprintf(dir, sizeof dir, "%s/gguf/%s", cdir, key);
    char gguf[PATH_MAX_], failed[PATH_MAX_], logp[PATH_MAX_];
    snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
    snprintf(failed, sizeof failed, "%s/convert.failed", dir);
    snprintf(logp, sizeof logp, "%s/convert.log", dir);
    if (!h->reconvert && file_exists(gguf)) {
        snprintf(out, n, "%s", gguf);
        return QC_PLUGIN_OK;
    }
    if (!h->reconvert && file_exists(failed)) {
        char why[2048] = "";
        FILE *fp = fopen(failed, "r");
        if (fp) {
            if (!fgets(why, sizeof why, fp)) why[0] = 0;
            fclose(fp);
        }
        why[strcspn(why, "\n")] = 0;
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s (cached failure %s, converter log "
                       "%s; reconvert=1 to retry)", why, failed, logp);
    }
    if (mkdir_p(dir) != 0)
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: cannot create %s: %s", dir, strerror(errno));
    char tmp[PATH_MAX_], tmplog[PATH_MAX_];
    snprintf(tmp, sizeof tmp, "%s/model.gguf.tmp.%ld", dir, (long)getpid());
    snprintf(tmplog, sizeof tmplog, "%s/convert.log.tmp.%ld", dir, (long)getpid());
    const char *conv = getenv("QC_LLAMACPP_CONVERT");
    if (!conv || !conv[0]) conv = QC_LLAMACPP_CONVERT;
    const char *src = getenv("QC_LLAMACPP_SRC");
    if (!src || !src[0]) src = QC_LLAMACPP_SRC;
    const char *py = QC_LLAMACPP_PYTHON;

    pid_t pid = fork();
    if (pid < 0) return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: fork: %s", strerror(errno));
    if (pid == 0) {
        /* child: stdin </dev/null, stdout and stderr > the log (never the host's stdout: in
         * exec mode that is the protocol channel) */
        int fd = open(tmplog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0) _exit(127);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (fd > 2) close(fd);
        if (nul > 2) close(nul);
        execl(py, py, conv, "--llama-src", src, "--outtype", h->outtype, "--mtp", h->mtp,
              "--mrope-section", h->fix_mrope ? "auto" : "stock", model_dir, tmp, (char *)NULL);
        dprintf(2, "qc_llamacpp: cannot run %s: %s\n", py, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    rename(tmplog, logp);
    int ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && file_exists(tmp);
    if (!ok) {
        unlink(tmp);
        char tail[2048], why[2048];
        file_tail(logp, tail, sizeof tail, 4);
        file_reason(logp, why, sizeof why);
        /* cache the failure (only a real converter failure, not "cannot run python"):
         * line 1 the reason, then the exit status and the log's last lines */
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 127) {
            char ftmp[PATH_MAX_];
            snprintf(ftmp, sizeof ftmp, "%s.tmp.%ld", failed, (long)getpid());
            FILE *fp = fopen(ftmp, "w");
            if (fp) {
                fprintf(fp, "%s\nexit status %d\n%s\n", why, WEXITSTATUS(status), tail);
                fclose(fp);
                rename(ftmp, failed);
            }
        }
        if (status != -1 && WIFSIGNALED(status))
            return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: the converter died (signal %d): %s (log: %s)",
                           WTERMSIG(status), why, logp);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s (converter exit status %d, log: %s)", why,
                       status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, logp);
    }
    if (rename(tmp, gguf) != 0) {
        unlink(tmp);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: rename to %s: %s", gguf, strerror(errno));
    }
    unlink(failed);
    snprintf(out, n, "%s", gguf);
    return QC_PLUGIN_OK;
}

