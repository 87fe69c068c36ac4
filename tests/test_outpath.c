/* test_outpath.c — output-file safety (harness/io/qc_outpath.h): identity of inputs and outputs
 * (hard links, symlinks, different spellings of a file not yet created), path validation,
 * --force for existing files, --dump-actual directories, atomic writes through symlinks,
 * direct writes to devices / FIFOs / stdout, temp-file cleanup on a failing write (RLIMIT_FSIZE
 * with SIGXFSZ ignored simulates a full disk) and on SIGTERM / SIGINT. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/io/qc_outpath.h"
#include "../harness/report/qc_report_json.h"
#include "../harness/io/qc_golden.h"

#ifndef QC_SOURCE_DIR
#define QC_SOURCE_DIR "."
#endif
#define FIXTURE QC_SOURCE_DIR "/fixtures/tiny-f32-tied-flat"

static char tmp_[256];

static void mk_tmp(void) {
    snprintf(tmp_, sizeof tmp_, "/tmp/qc_outpath_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_));
    qc_outpath_reset();
}

static void rm_tmp(void) {
    char cmd[800];
    qc_outpath_reset();
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", tmp_, tmp_);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmp_);
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static char *get(const char *path) {
    static char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void p(char *out, const char *rel) { snprintf(out, PATH_MAX, "%s/%s", tmp_, rel); }

/* no "*.tmp.*" file anywhere under dir (one level of subdirectories) */
static void assert_no_temp(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '*.tmp.*')\"", dir);
    ck_assert_msg(system(cmd) == 0, "temp file left under %s", dir);
}

static void assert_msg_has(const qc_err *e, const char *a, const char *b) {
    ck_assert_msg(strstr(e->msg, a) != NULL, "message lacks '%s': %s", a, e->msg);
    if (b) ck_assert_msg(strstr(e->msg, b) != NULL, "message lacks '%s': %s", b, e->msg);
}

static void cp(const char *from, const char *to) {
    char cmd[2 * PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    ck_assert_int_eq(system(cmd), 0);
}

/* ===================================================================================== */

/* Two outputs not yet created, spelled differently, are the same file. */
START_TEST(test_same_file_spellings) {
    mk_tmp();
    char a[PATH_MAX], x1[PATH_MAX], x2[PATH_MAX], cwd[PATH_MAX];
    p(a, "a");
    ck_assert_int_eq(mkdir(a, 0777), 0);
    p(x1, "a/x.json");
    p(x2, "./a/../a/x.json");
    snprintf(x2, sizeof x2, "%s/./a/../a//x.json", tmp_);
    qc_err err;
    qc_outpath_add_output(x1, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(x2, "--junit", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, "--junit", "--json");
    assert_msg_has(&err, x1, x2);
    assert_msg_has(&err, "another output", NULL);
    /* relative spellings from the current directory */
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(tmp_), 0);
    qc_outpath_reset();
    qc_outpath_add_output("a/y.xml", "--json", QC_OUT_TEXT);
    qc_outpath_add_output("./a/../a/y.xml", "--junit", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, "./a/../a/y.xml", "a/y.xml");
    /* distinct names are fine, and nothing was created */
    qc_outpath_reset();
    qc_outpath_add_output("a/y.xml", "--json", QC_OUT_TEXT);
    qc_outpath_add_output("a/y.json", "--junit", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_OK);
    ck_assert_int_ne(access("a/y.xml", F_OK), 0);
    ck_assert_int_eq(chdir(cwd), 0);
    /* the same input and output path, not yet existing (an input the run will fail to read) */
    qc_outpath_reset();
    qc_outpath_add_input(x1, "--policy");
    qc_outpath_add_output(x2, "--json", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, "--policy", "an input of this run");
    rm_tmp();
}
END_TEST

/* An output that is a hard link or a symlink (or a chain of them) to an input is refused. */
START_TEST(test_links_to_inputs) {
    mk_tmp();
    char in[PATH_MAX], hard[PATH_MAX], sym[PATH_MAX], sym2[PATH_MAX], d[PATH_MAX];
    char dang[PATH_MAX], newf[PATH_MAX];
    p(in, "in.h5");
    p(hard, "hard.json");
    p(sym, "sym.json");
    p(sym2, "sub/sym2.json");
    p(d, "sub");
    put(in, "golden bytes");
    ck_assert_int_eq(mkdir(d, 0777), 0);
    ck_assert_int_eq(link(in, hard), 0);
    ck_assert_int_eq(symlink("in.h5", sym), 0);
    ck_assert_int_eq(symlink("../sym.json", sym2), 0);
    const char *outs[3] = {hard, sym, sym2};
    for (int i = 0; i < 3; i++) {
        qc_err err;
        qc_outpath_reset();
        qc_outpath_add_input(in, "golden");
        qc_outpath_add_output(outs[i], "--json", QC_OUT_TEXT);
        ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
        assert_msg_has(&err, outs[i], in);
        assert_msg_has(&err, "golden, an input of this run", "--json");
        /* qc_out_open refuses it too once the run is verified (the last line of defence) */
        qc_outpath_reset();
        qc_outpath_add_input(in, "golden");
        ck_assert_int_eq(qc_outpath_verify(&err), QC_OK);
        ck_assert_int_eq(qc_out_write_file(outs[i], "x", 1, QC_OUT_TEXT, &err), QC_ERR_ARG);
        assert_msg_has(&err, in, "refusing to overwrite");
    }
    ck_assert_str_eq(get(in), "golden bytes");
    /* a dangling symlink output and the file it would create */
    p(dang, "dangling.json");
    p(newf, "new.json");
    ck_assert_int_eq(symlink("new.json", dang), 0);
    qc_err err;
    qc_outpath_reset();
    qc_outpath_add_output(newf, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(dang, "--junit", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, dang, newf);
    assert_no_temp(tmp_);
    rm_tmp();
}
END_TEST

/* Every bad output path is refused, naming the option. */
START_TEST(test_validation) {
    mk_tmp();
    char ro[PATH_MAX], nodir[PATH_MAX], trail[PATH_MAX], longname[PATH_MAX], ok[PATH_MAX];
    static char longpath[6000];
    qc_err err;
    p(ro, "ro.json");
    put(ro, "keep");
    ck_assert_int_eq(chmod(ro, 0444), 0);
    p(nodir, "no/such/dir/r.json");
    p(trail, "sub/");
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    char base[260];
    memset(base, 'b', 250);
    base[250] = '\0';
    snprintf(longname, sizeof longname, "%s/%s", tmp_, base);
    p(ok, "ok.json");
    struct {
        const char *path, *want;
        unsigned flags;
    } cases[] = {
        {"", "empty path", QC_OUT_TEXT},
        {nodir, "does not exist", QC_OUT_TEXT},
        {tmp_, "is a directory", QC_OUT_TEXT},
        {trail, "directory", QC_OUT_TEXT},
        {longpath, "too long", QC_OUT_TEXT},
        {longname, "too long", QC_OUT_TEXT},
        {ro, "read-only", QC_OUT_TEXT},
        {"/dev/null", "regular file", QC_OUT_REGULAR},
        {"-", "regular file", QC_OUT_REGULAR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qc_err_clear(&err);
        ck_assert_msg(qc_outpath_validate(cases[i].path, "--opt", cases[i].flags, &err) != QC_OK,
                      "case %zu accepted", i);
        assert_msg_has(&err, "--opt", cases[i].want);
        qc_outpath_reset();
        qc_outpath_add_output(cases[i].path, "--json", cases[i].flags);
        ck_assert_int_ne(qc_outpath_verify(&err), QC_OK);
        assert_msg_has(&err, "--json", cases[i].want);
        /* and the writer refuses it as well, leaving nothing behind */
        qc_outpath_reset();
        ck_assert_int_ne(qc_out_write_file(cases[i].path, "x", 1, cases[i].flags, &err), QC_OK);
    }
    ck_assert_str_eq(get(ro), "keep"); /* read-only: refused even as root */
    ck_assert_int_eq(qc_outpath_validate(ok, "--json", QC_OUT_TEXT, &err), QC_OK);
    ck_assert_int_eq(qc_outpath_validate("-", "--json", QC_OUT_TEXT, &err), QC_OK);
    ck_assert_int_eq(qc_outpath_validate("/dev/null", "--json", QC_OUT_TEXT, &err), QC_OK);
    ck_assert_int_ne(access(ok, F_OK), 0);
    assert_no_temp(tmp_);
    rm_tmp();
}
END_TEST

/* --out onto an existing file needs --force; a golden is named as one. */
START_TEST(test_no_clobber) {
    mk_tmp();
    char g[PATH_MAX], plain[PATH_MAX];
    p(g, "golden.h5");
    p(plain, "plain.h5");
    cp(FIXTURE "/golden.h5", g);
    put(plain, "x");
    qc_err err;
    unsigned nc = QC_OUT_REGULAR | QC_OUT_NO_CLOBBER;
    ck_assert_int_eq(qc_outpath_validate(g, "--out", nc, &err), QC_ERR_ARG);
    assert_msg_has(&err, "golden file (schema_version 1)", "--force");
    ck_assert_int_eq(qc_outpath_validate(plain, "--out", nc, &err), QC_ERR_ARG);
    assert_msg_has(&err, "exists", "--force");
    ck_assert_int_eq(qc_outpath_validate(g, "--out", nc | QC_OUT_FORCE, &err), QC_OK);
    int schema = -1;
    ck_assert_int_eq(qc_outpath_is_golden(g, &schema), 1);
    ck_assert_int_eq(schema, 1);
    ck_assert_int_eq(qc_outpath_is_golden(plain, NULL), 0);
    rm_tmp();
}
END_TEST

/* A golden directory registers every golden and its model's files; a corrupt golden is
 * skipped (read in a child process), not fatal. */
START_TEST(test_goldens_and_models) {
    mk_tmp();
    qc_err err;
    const char *victims[] = {FIXTURE "/golden.h5", FIXTURE "/model/config.json",
                             FIXTURE "/model/model.safetensors"};
    for (int i = 0; i < 3; i++) {
        qc_outpath_reset();
        qc_outpath_add_goldens(FIXTURE, 1);
        qc_outpath_add_output(victims[i], "--junit", QC_OUT_TEXT);
        ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG); /* verify only: never written */
        assert_msg_has(&err, victims[i], i ? "model file of golden" : "(golden,");
    }
    char bad[PATH_MAX], badf[PATH_MAX], out[PATH_MAX];
    p(bad, "bad");
    p(badf, "bad/x.h5");
    p(out, "r.json");
    ck_assert_int_eq(mkdir(bad, 0777), 0);
    put(badf, "not hdf5");
    qc_outpath_reset();
    qc_outpath_add_goldens(bad, 1);
    qc_outpath_add_output(out, "--json", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_OK);
    qc_outpath_reset();
    qc_outpath_add_goldens(bad, 1);
    qc_outpath_add_output(badf, "--json", QC_OUT_TEXT);
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    rm_tmp();
}
END_TEST

/* --dump-actual must not be where the run reads goldens. */
START_TEST(test_dump_dir) {
    mk_tmp();
    char gd[PATH_MAX], gf[PATH_MAX], sub[PATH_MAX], other[PATH_MAX], odd[PATH_MAX];
    p(gd, "g");
    p(gf, "g/golden.h5");
    p(sub, "g/sub/deeper");
    p(other, "other");
    snprintf(odd, sizeof odd, "%s/other/../g/", tmp_);
    ck_assert_int_eq(mkdir(gd, 0777), 0);
    ck_assert_int_eq(mkdir(other, 0777), 0);
    put(gf, "not really a golden");
    qc_err err;
    const char *refused[] = {gd, odd};
    for (int i = 0; i < 2; i++) {
        qc_outpath_reset();
        qc_outpath_add_goldens(gd, 0);
        qc_outpath_add_dump_dir(refused[i], "--dump-actual");
        ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
        assert_msg_has(&err, "--dump-actual", "golden directory");
    }
    char gsub[PATH_MAX];
    p(gsub, "g/sub");
    qc_outpath_reset();
    qc_outpath_add_goldens(gd, 0);
    qc_outpath_add_dump_dir(gsub, "--dump-actual"); /* not yet existing, inside the goldens */
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, "is inside", gd);
    qc_outpath_reset();
    qc_outpath_add_goldens(gd, 0);
    qc_outpath_add_dump_dir(sub, "--dump-actual"); /* parent g/sub does not exist */
    ck_assert_int_ne(qc_outpath_verify(&err), QC_OK);
    qc_outpath_reset();
    qc_outpath_add_goldens(gf, 0); /* a golden file: its directory is refused */
    qc_outpath_add_dump_dir(gd, "--dump-actual");
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, "contains the golden", gf);
    qc_outpath_reset();
    qc_outpath_add_goldens(gd, 0);
    qc_outpath_add_dump_dir(other, "--dump-actual");
    ck_assert_int_eq(qc_outpath_verify(&err), QC_OK);
    qc_outpath_reset();
    qc_outpath_add_goldens(gd, 0);
    qc_outpath_add_dump_dir(gf, "--dump-actual"); /* a file */
    ck_assert_int_eq(qc_outpath_verify(&err), QC_ERR_ARG);
    assert_msg_has(&err, "not a directory", NULL);
    rm_tmp();
}
END_TEST

/* A symlink output: the target is replaced atomically in its own directory, the link stays,
 * the target's mode is kept. */
START_TEST(test_symlink_written_through) {
    mk_tmp();
    char d2[PATH_MAX], real[PATH_MAX], link_[PATH_MAX], buf[PATH_MAX];
    p(d2, "d2");
    p(real, "d2/real.json");
    p(link_, "link.json");
    ck_assert_int_eq(mkdir(d2, 0777), 0);
    put(real, "old");
    ck_assert_int_eq(chmod(real, 0640), 0);
    ck_assert_int_eq(symlink("d2/real.json", link_), 0);
    qc_out o;
    qc_err err;
    ck_assert_int_eq(qc_out_open(&o, link_, QC_OUT_TEXT, &err), QC_OK);
    ck_assert_int_eq(o.direct, 0);
    ck_assert_msg(strncmp(o.tmp, real, strlen(real)) == 0, "temp %s not beside %s", o.tmp, real);
    ck_assert_int_eq(access(o.tmp, F_OK), 0);
    ck_assert_int_eq(qc_outpath_active_temps(), 1);
    ck_assert_int_eq(qc_out_write(&o, "new", 3, &err), QC_OK);
    ck_assert_str_eq(get(real), "old"); /* untouched until the commit */
    ck_assert_int_eq(qc_out_commit(&o, &err), QC_OK);
    ck_assert_int_eq(qc_outpath_active_temps(), 0);
    struct stat sb;
    ck_assert_int_eq(lstat(link_, &sb), 0);
    ck_assert(S_ISLNK(sb.st_mode));
    ssize_t k = readlink(link_, buf, sizeof buf - 1);
    ck_assert_int_gt(k, 0);
    buf[k] = '\0';
    ck_assert_str_eq(buf, "d2/real.json");
    ck_assert_str_eq(get(real), "new");
    ck_assert_int_eq(stat(real, &sb), 0);
    ck_assert_int_eq((int)(sb.st_mode & 0777), 0640);
    if (geteuid() == 0) { /* as root next to a user's file: the replacement keeps its owner */
        ck_assert_int_eq(chown(real, 1234, 2345), 0);
        ck_assert_int_eq(qc_out_write_file(link_, "newer", 5, QC_OUT_TEXT, &err), QC_OK);
        ck_assert_int_eq(stat(real, &sb), 0);
        ck_assert_int_eq((int)sb.st_uid, 1234);
        ck_assert_int_eq((int)sb.st_gid, 2345);
        ck_assert_str_eq(get(real), "newer");
        put(real, "new");
    }
    /* abort removes the temp file and keeps the target */
    ck_assert_int_eq(qc_out_open(&o, link_, QC_OUT_TEXT, &err), QC_OK);
    ck_assert_int_eq(qc_out_write(&o, "zzz", 3, &err), QC_OK);
    qc_out_abort(&o);
    qc_out_abort(&o); /* twice is fine */
    ck_assert_str_eq(get(real), "new");
    assert_no_temp(tmp_);
    rm_tmp();
}
END_TEST

/* Devices, FIFOs and stdout are written directly and stay what they are. */
START_TEST(test_direct_targets) {
    mk_tmp();
    qc_err err;
    struct stat sb;
    /* /dev/null */
    ck_assert_int_eq(qc_out_write_file("/dev/null", "x", 1, QC_OUT_TEXT, &err), QC_OK);
    ck_assert_int_eq(lstat("/dev/null", &sb), 0);
    ck_assert(S_ISCHR(sb.st_mode));
    /* /dev/full: ENOSPC is an error naming the file, the device stays */
    if (access("/dev/full", W_OK) == 0) {
        ck_assert_int_eq(qc_out_write_file("/dev/full", "x", 1, QC_OUT_TEXT, &err), QC_ERR_IO);
        assert_msg_has(&err, "/dev/full", "write failed");
        ck_assert_int_eq(lstat("/dev/full", &sb), 0);
        ck_assert(S_ISCHR(sb.st_mode));
    }
    /* a FIFO */
    char fifo[PATH_MAX];
    p(fifo, "fifo");
    ck_assert_int_eq(mkfifo(fifo, 0666), 0);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    ck_assert_int_ge(rfd, 0);
    ck_assert_int_eq(qc_out_write_file(fifo, "hello\n", 6, QC_OUT_TEXT, &err), QC_OK);
    char buf[16] = {0};
    ck_assert_int_eq((int)read(rfd, buf, sizeof buf - 1), 6);
    ck_assert_str_eq(buf, "hello\n");
    close(rfd);
    ck_assert_int_eq(lstat(fifo, &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    /* "-", /dev/stdout, /dev/fd/1: fd 1, here redirected to a file */
    char so[PATH_MAX];
    p(so, "stdout.txt");
    fflush(stdout);
    int saved = dup(1);
    int fd = open(so, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 1);
    close(fd);
    qc_status s1 = qc_out_write_file("-", "A", 1, QC_OUT_TEXT, &err);
    qc_status s2 = qc_out_write_file("/dev/stdout", "B", 1, QC_OUT_TEXT, &err);
    qc_status s3 = qc_out_write_file("/dev/fd/1", "C", 1, QC_OUT_TEXT, &err);
    /* two reports sharing a stream are allowed (appended, never replaced) */
    qc_outpath_reset();
    qc_outpath_add_output("-", "--json", QC_OUT_TEXT);
    qc_outpath_add_output("/dev/stdout", "--junit", QC_OUT_TEXT);
    qc_status s4 = qc_outpath_verify(&err);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    ck_assert_int_eq(s1, QC_OK);
    ck_assert_int_eq(s2, QC_OK);
    ck_assert_int_eq(s3, QC_OK);
    ck_assert_int_eq(s4, QC_OK);
    ck_assert_str_eq(get(so), "ABC");
    ck_assert_int_eq(lstat("/dev/stdout", &sb), 0);
    ck_assert_msg(S_ISLNK(sb.st_mode) || S_ISCHR(sb.st_mode), "/dev/stdout was replaced");
    assert_no_temp(tmp_);
    rm_tmp();
}
END_TEST

/* EPIPE: on stdout the output just ends; on a named FIFO it is an error. */
START_TEST(test_broken_pipe) {
    mk_tmp();
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    qc_err err;
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    close(pfd[0]);
    fflush(stdout);
    int saved = dup(1);
    dup2(pfd[1], 1);
    close(pfd[1]);
    qc_status s1 = qc_out_write_file("-", "lost", 4, QC_OUT_TEXT, &err);
    dup2(saved, 1);
    close(saved);
    ck_assert_int_eq(s1, QC_OK);
    char fifo[PATH_MAX];
    p(fifo, "fifo");
    ck_assert_int_eq(mkfifo(fifo, 0666), 0);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    qc_out o;
    ck_assert_int_eq(qc_out_open(&o, fifo, QC_OUT_TEXT, &err), QC_OK);
    close(rfd);
    ck_assert_int_eq(qc_out_write(&o, "x", 1, &err), QC_ERR_IO);
    assert_msg_has(&err, fifo, "write failed");
    qc_out_abort(&o);
    signal(SIGPIPE, old);
    rm_tmp();
}
END_TEST

/* A write that fails (file size limit = a full disk) removes the temp file and leaves the old
 * target intact: raw writes, the JSON report and an HDF5 golden. */
START_TEST(test_failing_write_cleans_up) {
    mk_tmp();
    char keep[PATH_MAX], rep[PATH_MAX], g[PATH_MAX];
    p(keep, "keep.json");
    p(rep, "report.json");
    p(g, "golden.h5");
    put(keep, "precious");
    put(rep, "old report");
    qc_golden *gold = NULL;
    qc_err err;
    ck_assert_msg(qc_golden_open(FIXTURE "/golden.h5", &gold, &err) == QC_OK, "%s", err.msg);
    qc_results r;
    qc_results_init(&r);
    for (int i = 0; i < 200; i++) {
        qc_check_row row;
        memset(&row, 0, sizeof row);
        snprintf(row.stem, sizeof row.stem, "stem");
        snprintf(row.case_name, sizeof row.case_name, "case%d", i);
        snprintf(row.check, sizeof row.check, "prefill.logits");
        snprintf(row.keyline, sizeof row.keyline, "a key line long enough to fill the file");
        ck_assert_ptr_nonnull(qc_results_add(&r, &row));
    }
    static char big[100000];
    memset(big, 'z', sizeof big);

    struct rlimit old;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 4096;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    qc_err e1, e2;
    qc_status s1 = qc_out_write_file(keep, big, sizeof big, QC_OUT_TEXT, &e1);
    qc_status s2 = qc_report_json_write(rep, &r, &e2);
    int active = qc_outpath_active_temps();
    /* the HDF5 write in a child: after a write error libhdf5 keeps the file open and is
     * marked unusable (qc_golden_hdf5_faulted; the CLI then leaves with _exit) */
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        qc_err e3;
        qc_status s3 = qc_golden_write(g, gold, &e3);
        int ok = s3 != QC_OK && strstr(e3.msg, g) != NULL && qc_outpath_active_temps() == 0 &&
                 access(g, F_OK) != 0 && qc_golden_hdf5_faulted();
        if (!ok) fprintf(stderr, "qc_golden_write under the limit: %d %s\n", s3, e3.msg);
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);

    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "golden write child: %d", status);
    ck_assert_int_eq(s1, QC_ERR_IO);
    assert_msg_has(&e1, keep, "write failed");
    ck_assert_int_eq(s2, QC_ERR_IO);
    assert_msg_has(&e2, rep, NULL);
    ck_assert_int_eq(active, 0);
    ck_assert_str_eq(get(keep), "precious");
    ck_assert_str_eq(get(rep), "old report");
    ck_assert_int_ne(access(g, F_OK), 0);
    assert_no_temp(tmp_);
    /* without the limit the same writes succeed */
    ck_assert_int_eq(qc_report_json_write(rep, &r, &err), QC_OK);
    ck_assert_msg(qc_golden_write(g, gold, &err) == QC_OK, "%s", err.msg);
    qc_golden *back = NULL;
    ck_assert_msg(qc_golden_open(g, &back, &err) == QC_OK, "%s", err.msg);
    ck_assert_int_eq(back->n_cases, gold->n_cases);
    qc_golden_free(back);
    assert_no_temp(tmp_);
    qc_results_free(&r);
    qc_golden_free(gold);
    rm_tmp();
}
END_TEST

/* SIGTERM / SIGINT while a temp file exists: the handler removes it and the process dies of
 * the signal (status 128 + signo in a shell). */
START_TEST(test_signal_removes_temp) {
    static const int sigs[2] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; k++) {
        mk_tmp();
        char target[PATH_MAX];
        p(target, "sig.json");
        int pfd[2];
        ck_assert_int_eq(pipe(pfd), 0);
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            close(pfd[0]);
            signal(SIGINT, SIG_DFL); /* a test run in the background starts with it ignored */
            signal(SIGTERM, SIG_DFL);
            qc_outpath_install_signal_handlers();
            qc_out o;
            qc_err err;
            if (qc_out_open(&o, target, QC_OUT_TEXT, &err) || qc_out_write(&o, "part", 4, &err))
                _exit(3);
            size_t n = strlen(o.tmp) + 1;
            if (write(pfd[1], o.tmp, n) != (ssize_t)n) _exit(4);
            for (;;) pause();
        }
        close(pfd[1]);
        char tmpname[PATH_MAX] = {0};
        ssize_t got = 0, r;
        while ((r = read(pfd[0], tmpname + got, sizeof tmpname - 1 - (size_t)got)) > 0) {
            got += r;
            if (tmpname[got - 1] == '\0') break;
        }
        close(pfd[0]);
        ck_assert_int_gt((int)got, 0);
        ck_assert_msg(access(tmpname, F_OK) == 0, "temp %s not there before the signal", tmpname);
        kill(pid, sigs[k]);
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == sigs[k],
                      "child status %d, expected death by signal %d", status, sigs[k]);
        ck_assert_msg(access(tmpname, F_OK) != 0, "temp %s left after signal %d", tmpname,
                      sigs[k]);
        ck_assert_int_ne(access(target, F_OK), 0);
        assert_no_temp(tmp_);
        rm_tmp();
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("outpath");
    TCase *tc = tcase_create("outpath");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_same_file_spellings);
    tcase_add_test(tc, test_links_to_inputs);
    tcase_add_test(tc, test_validation);
    tcase_add_test(tc, test_no_clobber);
    tcase_add_test(tc, test_goldens_and_models);
    tcase_add_test(tc, test_dump_dir);
    tcase_add_test(tc, test_symlink_written_through);
    tcase_add_test(tc, test_direct_targets);
    tcase_add_test(tc, test_broken_pipe);
    tcase_add_test(tc, test_failing_write_cleans_up);
    tcase_add_test(tc, test_signal_removes_temp);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
