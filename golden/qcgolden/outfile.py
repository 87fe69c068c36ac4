"""qcgolden.outfile — the one output-file check of the golden tools (user files are sacred):
an output may not be one of the run's inputs, a directory, a special file or read-only; a
symlink is written through (the link kept). Raises InputError (reported as one line, exit 2)."""
import os
import stat as _stat


class InputError(Exception):
    """Bad input: reported as one line, exit 2 (never a traceback)."""


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_file(out, inputs, flag="--out"):
    """The file `out` can be written by temp file + rename: its directory exists and is
    writable, it is not a directory, a special file, read-only or one of `inputs`
    [(path, what)]. Returns the path to write (a symlink's target: the link is kept)."""
    if not out:
        raise InputError("%s: empty path" % flag)
    for p, what in inputs:
        if os.path.lexists(out) and _same_file(out, p) or \
                os.path.realpath(out) == os.path.realpath(p):
            raise InputError("%s %s: is the same file as %s (%s, an input): refused"
                             % (flag, out, p, what))
    target = os.path.realpath(out) if os.path.islink(out) else out
    if os.path.isdir(target):
        raise InputError("%s %s: is a directory" % (flag, out))
    d = os.path.dirname(os.path.abspath(target)) or os.sep
    if not os.path.isdir(d):
        raise InputError("%s %s: directory %s does not exist" % (flag, out, d))
    if os.path.lexists(target):
        st = os.stat(target)
        if not _stat.S_ISREG(st.st_mode):
            raise InputError("%s %s: is not a regular file (an HDF5 golden needs one)"
                             % (flag, out))
        if not st.st_mode & 0o222:
            raise InputError("%s %s: is read-only (mode %o): refused" % (flag, out,
                                                                        st.st_mode & 0o777))
    probe = "%s.tmp.%d" % (target, os.getpid())
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError("%s %s: cannot write in %s: %s" % (flag, out, d, e.strerror or e))
    return target


def model_inputs(model_dir, what="the model"):
    """[(path, what)] of every file in model_dir (none when it does not exist)."""
    if not os.path.isdir(model_dir):
        return []
    return [(os.path.join(model_dir, f), what) for f in sorted(os.listdir(model_dir))]
