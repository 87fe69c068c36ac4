/* qc_file.c — read a small input file whole; never block on a FIFO or a device
 * (include/qc/qc_file.h). */
#include "qc/qc_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *qc_file_kind(unsigned mode) {
    mode_t m = (mode_t)mode;
    if (S_ISREG(m)) return "a regular file";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "a special file";
}

qc_status qc_read_small_file(const char *path, size_t max_bytes, char **buf, size_t *len,
                             qc_err *err) {
    *buf = NULL;
    *len = 0;
    if (!path || !path[0]) return qc_errf(err, QC_ERR_IO, "(empty path): cannot open");
    if (max_bytes >= SIZE_MAX - 1) max_bytes = SIZE_MAX - 2;
    /* 1. refuse a non-regular file before opening it: no open() of a FIFO or a device */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file (%s)", path,
                       qc_file_kind((unsigned)sb.st_mode));
    /* 2. open without blocking (it may have been replaced by a FIFO since the stat) and check
     * what was actually opened */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return qc_errf(err, QC_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file (%s)", path,
                       qc_file_kind((unsigned)sb.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)max_bytes) {
        close(fd);
        return qc_errf(err, QC_ERR_FORMAT, "%s: %lld bytes is larger than the %zu-byte limit",
                       path, (long long)sb.st_size, max_bytes);
    }
    /* 3. read to EOF (the file may grow while read: never past max_bytes) */
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *b = malloc(cap + 1);
    if (!b) {
        close(fd);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory (%zu bytes)", path, cap + 1);
    }
    for (;;) {
        if (n == cap) {
            if (cap > max_bytes) break; /* read max_bytes + 1: too large */
            size_t ncap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            if (ncap <= cap) ncap = cap + 1;
            char *nb = realloc(b, ncap + 1);
            if (!nb) {
                free(b);
                close(fd);
                return qc_errf(err, QC_ERR_OOM, "%s: out of memory (%zu bytes)", path, ncap + 1);
            }
            b = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, b + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(b);
            close(fd);
            return qc_errf(err, QC_ERR_IO, "%s: read error: %s", path, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (n > max_bytes) {
        free(b);
        return qc_errf(err, QC_ERR_FORMAT, "%s: larger than the %zu-byte limit", path, max_bytes);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return QC_OK;
}

int qc_fd_write_all(int fd, const void *buf, size_t n) {
    const char *c = buf;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int qc_fd_read_all(int fd, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return got == 0 && k == 0 ? 0 : -1;
        got += (size_t)k;
    }
    return 1;
}
