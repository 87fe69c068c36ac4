/* qc_file.h — reading a small input file (config.json, an index, a profile, a policy, a token
 * list) whole, safely: the one place every such file is opened.
 *
 * Only a regular file is read. Anything else — a FIFO, a character or block device, a socket,
 * a directory — is refused *without blocking*: the path is stat'ed, then opened with
 * O_NONBLOCK (opening a FIFO that has no writer would otherwise wait forever) and fstat'ed
 * again (the file may have been replaced in between). Messages name the path:
 *   "in/prompt.txt: not a regular file (a FIFO)"
 *   "m/config.json: cannot open: No such file or directory"
 *   "p.json: 70000 bytes is larger than the 65536-byte limit"
 */
#ifndef QC_FILE_H
#define QC_FILE_H

#include <stddef.h>

#include "qc/qc_status.h"

/* Read the regular file `path` (at most max_bytes bytes) into a malloc'd, NUL-terminated
 * buffer; *len excludes the NUL (the contents may hold NUL bytes: compare *len with strlen).
 * Errors: QC_ERR_IO (cannot stat / open / read, not a regular file), QC_ERR_FORMAT (larger
 * than max_bytes), QC_ERR_OOM. On error *buf is NULL and *len 0. */
qc_status qc_read_small_file(const char *path, size_t max_bytes, char **buf, size_t *len,
                             qc_err *err);

/* "a FIFO", "a directory", "a character device", "a block device", "a socket", "a symbolic
 * link", "a regular file" or "a special file" for a st_mode. Never NULL. */
const char *qc_file_kind(unsigned mode);

/* Write all n bytes to fd, retrying EINTR and short writes. 0, or -1 on an error or a write
 * that made no progress (errno from write). */
int qc_fd_write_all(int fd, const void *buf, size_t n);

/* Read exactly n bytes from fd, retrying EINTR and short reads. 1 = done (also for n == 0),
 * 0 = end of file before the first byte, -1 = end of file part-way, or an error. */
int qc_fd_read_all(int fd, void *buf, size_t n);

#endif /* QC_FILE_H */
