"""The one door to the disk.

Every byte the AOF and the node file put on disk, every fsync, truncate
and rename, goes through a :class:`FileSystem`; every file replaced whole
(the node file, the ACL file, CONFIG REWRITE's config file, check_aof's
repairs) goes through :func:`atomic_write`.  The node uses :data:`OS`;
tests substitute a subclass that fails chosen calls (a full disk, an I/O
error) or records them to replay the crash states a kernel allows
(``tests/support/crash_states.py``).

Invariants the callers rely on:

* files that hold jobs or the cluster's state are created ``0600``
  (:data:`PRIVATE`): job bodies are other people's data;
* :func:`write_all` either writes every byte or raises, and reports how
  many bytes a failed call left behind (``PartialWrite.written``), so the
  caller can cut them away: no half record stays in the middle of a file;
* :func:`atomic_write` leaves either the old file or the new one, whole
  and on disk (temp file fsynced, renamed, directory fsynced), and never a
  temp file behind; the new file is ``0600`` unless the caller names
  another mode (a config file keeps its own).

It stands below every layer that writes a file (the config, the ACL,
persistence, the node, check_aof) and imports nothing of the project.
"""

import errno
import os
import re

PRIVATE = 0o600


class PartialWrite(OSError):
    """A write that failed after ``written`` bytes reached the file."""

    def __init__(self, err, strerror, written):
        super().__init__(err, strerror)
        self.written = written


class FileSystem:
    """The system calls persistence makes, one method each (file
    descriptors, not Python file objects: no hidden buffer can swallow a
    short write)."""

    def open_append(self, path):
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE)

    def create(self, path):
        """A new empty file (an existing one is truncated)."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)

    def write(self, fd, data):
        """One ``write(2)``: may write less than ``data`` (a full disk)."""
        return os.write(fd, data)

    def fsync(self, fd):
        os.fsync(fd)

    def truncate(self, fd, size):
        os.ftruncate(fd, size)

    def size(self, fd):
        return os.fstat(fd).st_size

    def chmod(self, fd, mode):
        """Set the permission bits of an open file to exactly ``mode``."""
        os.fchmod(fd, mode)

    def close(self, fd):
        os.close(fd)

    def replace(self, src, dst):
        os.replace(src, dst)

    def unlink(self, path):
        os.unlink(path)

    def fsync_dir(self, path):
        """Make a rename or a creation in directory ``path`` durable."""
        fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS = FileSystem()


def write_all(fs, fd, data):
    """Write all of ``data`` to ``fd`` (looping over short writes).  Raises
    :class:`PartialWrite` (an OSError: the error of the call that failed,
    ``ENOSPC`` for a write that took nothing) with the number of bytes
    that did reach the file."""
    view = memoryview(data)
    done = 0
    total = len(data)
    while done < total:
        try:
            n = fs.write(fd, view[done:])
        except OSError as e:
            raise PartialWrite(e.errno, e.strerror, done) from None
        if n <= 0:
            raise PartialWrite(errno.ENOSPC, os.strerror(errno.ENOSPC), done)
        done += n


# The temp files written beside a file: temp_path's <name>.tmp-<pid>,
# rewrite_temp_path's <name>.rewrite-<pid>.tmp.
_TEMP = re.compile(r"\.(?:tmp-(\d+)|rewrite-(\d+)\.tmp)$")


def _running(pid):
    if pid == os.getpid():
        return False  # (this process is starting: nothing of its own is being written yet)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process)
        return True
    return True


def remove_stale_temps(fs, path):
    """Remove the temp files of ``path`` that a process which is gone left
    behind (a crash in the middle of a rewrite or a save); those of a
    process still running (another node misconfigured to share the
    directory) stay.  Returns the paths removed."""
    directory, name = os.path.split(path)
    removed = []
    try:
        entries = os.listdir(directory or ".")
    except OSError:
        return removed
    for entry in entries:
        if not entry.startswith(name + "."):
            continue
        m = _TEMP.search(entry[len(name):])
        if m is None or m.start() != 0 or _running(int(m.group(1) or m.group(2))):
            continue
        try:
            fs.unlink(os.path.join(directory, entry))
        except OSError:
            continue
        removed.append(os.path.join(directory, entry))
    return removed


def temp_path(path):
    """The temp file a write of ``path`` goes through (beside it, so the
    rename stays on one file system)."""
    return "%s.tmp-%d" % (path, os.getpid())


def rewrite_temp_path(path):
    """The temp file an AOF rewrite of ``path`` writes."""
    return "%s.rewrite-%d.tmp" % (path, os.getpid())


def atomic_write(fs, path, data, mode=None):
    """Replace the file at ``path`` with ``data``, crash-safely: temp file
    (:func:`temp_path`, 0600 or ``mode``), fsync, rename over ``path``,
    fsync of the directory.  ``data`` is bytes, or an iterable of bytes
    written in turn (a big file copied in chunks).  On any error (an
    exception the iterable raises included) the temp file is removed and
    the error raised; ``path`` is then untouched, unless only the last
    step, the directory's fsync, failed: then the new file is in place
    but its name may not survive a crash."""
    tmp = temp_path(path)
    fd = fs.create(tmp)
    try:
        try:
            if mode is not None:
                fs.chmod(fd, mode)
            if isinstance(data, (bytes, bytearray, memoryview)):
                write_all(fs, fd, data)
            else:
                for chunk in data:
                    write_all(fs, fd, chunk)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.replace(tmp, path)
    except BaseException:
        try:
            fs.unlink(tmp)
        except OSError:
            pass
        raise
    fs.fsync_dir(os.path.dirname(path))
