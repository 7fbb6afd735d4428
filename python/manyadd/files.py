"""The atomic writer and the error type of bad input, as core/include/manyadd/core/files.hpp.

Writing: the bytes go to a temporary file beside the target (same directory, so the rename is atomic),
which is fsynced, renamed over the target, and the directory fsynced; on every failure path the
temporary is removed. The target must be a new path or an existing regular file: a directory, a device
(/dev/null), a FIFO or a symbolic link is refused with InputError before anything is written (a rename
would replace the link or the device node by a file).

Reading: open_regular opens a regular file only; a FIFO (which would block the reader forever), a
device or a directory is refused with InputError before anything is read.
"""
import os
import stat


class InputError(ValueError):
    """Bad input a user can correct (a malformed file, an unusable path): the CLIs' exit code 2."""


def check_output_path(path):
    """Raises InputError when `path` cannot be the target of an atomic write (see above)."""
    path = os.fspath(path)
    if not path:
        raise InputError("an output path is empty")
    if path.endswith("/"):
        raise InputError("output '%s' names a directory, not a file" % path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError("output '%s': %s" % (path, e.strerror)) from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise InputError("output '%s' is a symbolic link: refusing to replace it (give the target's path)" % path)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("output '%s' is a directory, not a file" % path)
        if not stat.S_ISREG(st.st_mode):
            raise InputError("output '%s' exists and is not a regular file (a device or FIFO): refusing to replace it"
                             % path)
    d = os.path.dirname(path) or "."
    if not os.path.isdir(d):
        raise InputError("output '%s': directory '%s' does not exist" % (path, d))


def atomic_write(path, data):
    """Writes `data` (bytes, or str as UTF-8) to `path` atomically; InputError on any failure."""
    path = os.fspath(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    check_output_path(path)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    step = "create"
    fd = -1
    try:
        fd = os.open(tmp, flags, 0o644)
        step = "write"
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(fd, view):]
        step = "fsync"
        os.fsync(fd)
        step = "close"
        fd, f = -1, fd
        os.close(f)
        # The target may have changed since the first check: check again right before renaming.
        check_output_path(path)
        step = "rename"
        os.rename(tmp, path)
    except OSError as e:
        raise InputError("cannot write '%s': %s failed: %s" % (path, step, e.strerror or e)) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.lexists(tmp):
            os.unlink(tmp)
    try:  # best effort: some file systems refuse fsync on directories
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def open_regular(path):
    """A read-only file object of `path`, which must be a regular file: a FIFO, a device or a directory
    is refused before anything is read (a FIFO would block the reader forever). The type is checked on
    the opened descriptor (O_NONBLOCK: opening a FIFO does not wait for a writer), so a path swapped
    after the check cannot slip through."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError("cannot read '%s': %s" % (path, e.strerror or e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise InputError("'%s' is %s: a reader takes regular files only" % (path, kind))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
