/* slow_io.c — an LD_PRELOAD shim for tests/cli/test_export_inputs.sh: it makes a command that
 * writes its files atomically (a temp file, fsync, rename: harness/io/qc_outpath_write.c) slow
 * enough for the test to interrupt it mid-write, without any test hook in the product. Built by
 * the test:
 *     $CC -shared -fPIC slow_io.c -o slow_io.so -ldl
 *     QC_SLOW_IO_FSYNC_US=N LD_PRELOAD=./slow_io.so qwen-conform export-inputs ...
 * fsync of a regular file (once per file written, before its rename; a directory's fsync is
 * not slowed) first sleeps QC_SLOW_IO_FSYNC_US microseconds when that env var is set and > 0,
 * then calls the real fsync. A signal cuts the sleep short (the command then sees it at once).
 * Unset: a pure pass-through. It lives here, not in tests/support/ (whose C files are linked
 * into the unit tests, which must keep the real fsync). */
#define _GNU_SOURCE 1 /* RTLD_NEXT */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

__attribute__((visibility("default"))) int fsync(int fd) {
    static int (*real)(int);
    if (!real) {
        void *sym = dlsym(RTLD_NEXT, "fsync");
        if (!sym) {
            errno = ENOSYS;
            return -1;
        }
        *(void **)&real = sym;
    }
    const char *e = getenv("QC_SLOW_IO_FSYNC_US");
    long us = e && *e ? atol(e) : 0;
    struct stat sb;
    if (us > 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        int saved = errno;
        nanosleep(&ts, NULL); /* EINTR on a signal: fine, go on */
        errno = saved;
    }
    return real(fd);
}
