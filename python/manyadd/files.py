"""The atomic writer and the error type of bad input, as core/include/manyadd/core/files.hpp.

Writing: the bytes go to a temporary file beside the target (same directory, so the rename is atomic),
which is fsynced, renamed over the target, and the directory fsynced; on every failure path the
temporary is removed. The target must be a new path or an existing regular file: a directory, a device
(/dev/null), a FIFO or a symbolic link is refused with InputError before anything is written (a rename
would replace the link or the device node by a file).

Reading: open_regular opens a regular file only; a FIFO (which would block the reader forever), a
device or a directory is refused with InputError before anything is read. read_regular reads such a
file whole after its size (fstat) passed a stated bound, so a huge file is refused before anything is
allocated, and a file that grows while being read stops at the bound.

Paths: check_path_length refuses a path no file system here can hold (a name over NAME_MAX = 255 bytes,
a path of PATH_MAX = 4096 bytes or more) with a message instead of the OS's error halfway through;
check_output_dir checks an output directory up front (not empty, not too long, a directory, writable;
when it does not exist yet, its parent all of that), so a tool refuses before it runs anything.
"""
import os
import stat


NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits: bytes of one file name, of a whole path (with its NUL)


class InputError(ValueError):
    """Bad input a user can correct (a malformed file, an unusable path): the CLIs' exit code 2."""


def _show(path, keep=60):
    """A path for a one-line message: a long one shortened, control characters escaped."""
    text = path if len(path) <= keep else "%s...(%d bytes)" % (path[:keep], len(os.fsencode(path)))
    return text.encode("unicode_escape", "backslashreplace").decode("ascii") if not text.isprintable() else text


def check_path_length(path, what="path"):
    """InputError when `path` has a name over NAME_MAX bytes or is PATH_MAX bytes long or longer (what
    names the option in the message)."""
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise InputError("%s '%s' holds a NUL byte" % (what, _show(path)))
    if len(raw) >= PATH_MAX:
        raise InputError("%s '%s' is %d bytes long: a path has fewer than %d" % (what, _show(path), len(raw), PATH_MAX))
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            raise InputError("%s '%s': the name '%s' has %d bytes, more than the %d a file name may have"
                             % (what, _show(path), _show(os.fsdecode(part), 20), len(part), NAME_MAX))


def _writable_dir(d):
    """Whether this process may create files in the existing directory d (permissions, read-only mount)."""
    if not os.access(d, os.W_OK | os.X_OK):
        return False
    try:
        return not os.statvfs(d).f_flag & getattr(os, "ST_RDONLY", 1)
    except OSError:
        return True


def check_output_dir(path, what="--out", room=0):
    """InputError unless `path` can be an output directory: not empty, its names and length within the
    limits (with `room` bytes to spare for the paths a tool writes under it), an existing directory this
    process may write in, or a new name in such a directory. Nothing is created."""
    path = os.fspath(path)
    if not path:
        raise InputError("%s is empty: give a directory" % what)
    check_path_length(path, what)
    full = os.path.abspath(path)
    if room and len(os.fsencode(full)) + room >= PATH_MAX:
        raise InputError("%s '%s' is %d bytes long (as an absolute path): the files under it need %d bytes more, "
                         "and a path has fewer than %d" % (what, _show(path), len(os.fsencode(full)), room, PATH_MAX))
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # the parent's check below names what is missing
        st = None
    except OSError as e:
        raise InputError("%s '%s': %s" % (what, _show(path), e.strerror)) from None
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise InputError("%s '%s' exists and is not a directory" % (what, _show(path)))
        if not _writable_dir(path):
            raise InputError("%s '%s': the directory is not writable here" % (what, _show(path)))
        return
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise InputError("%s '%s': directory '%s' does not exist" % (what, _show(path), _show(parent)))
    if not _writable_dir(parent):
        raise InputError("%s '%s': directory '%s' is not writable here" % (what, _show(path), _show(parent)))


def check_output_path(path):
    """Raises InputError when `path` cannot be the target of an atomic write (see above)."""
    path = os.fspath(path)
    if not path:
        raise InputError("an output path is empty")
    check_path_length(path, "output")
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
        raise InputError("cannot read '%s': %s" % (_show(path), e.strerror or e)) from None
    except ValueError:  # a NUL byte in the path
        raise InputError("cannot read '%s': a path holds no NUL byte" % _show(path)) from None
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


def read_regular(path, max_bytes):
    """The bytes of the regular file `path` (open_regular), refused with InputError when its size is over
    max_bytes before anything is read; a file growing while it is read stops at the bound too."""
    path = os.fspath(path)
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise InputError("'%s' has %d bytes, more than the %d this reader accepts" % (_show(path), size, max_bytes))
        try:
            raw = f.read(max_bytes + 1)
        except OSError as e:
            raise InputError("cannot read '%s': %s" % (_show(path), e.strerror or e)) from None
    if len(raw) > max_bytes:
        raise InputError("'%s' is longer than the %d bytes this reader accepts" % (_show(path), max_bytes))
    return raw
