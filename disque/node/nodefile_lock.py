"""One node per node file: a lock taken before the node file is read.

Two nodes started on one ``dir`` (the same ``cluster-config-file``) would
take the same ID, overwrite each other's node file and, with the AOF on,
append to the same log.  So a node locks ``<node file>.lock``, beside the
node file, before reading it, and holds the lock while it runs; a second
node finds it locked and stops at start-up, naming the file and the pid
of the node that holds it.

Invariants: the lock is ``flock(LOCK_EX)`` on a file that is never
renamed or removed (the node file itself is replaced at each save, so a
lock on it would hold only until the first save); the kernel lets go of
it when the process ends, however it ends (``kill -9`` too), so a stale
lock file never stops a node; the file holds the pid of the node that
holds the lock (written again once the process is the one that runs:
twistd forks to go in the background after the service is built).
"""

import errno
import fcntl
import os

from .nodefile import NodeFileError


class NodeFileLock:
    """The lock of the node file ``nodes_path``, taken at once; raises
    NodeFileError (one line, for start-up) if another process holds it or
    the lock file cannot be made."""

    def __init__(self, nodes_path):
        self.path = nodes_path + ".lock"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as e:  # (the words of nodefile.check_writable: the dir cannot be written)
            raise NodeFileError("can't write the node file %s (dir, cluster-config-file): %s"
                                % (nodes_path, e.strerror or e)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise NodeFileError("the node file %s is in use by another node (%s): each node needs a dir, "
                                    "or a cluster-config-file, of its own"
                                    % (nodes_path, "pid %s" % holder if holder else "pid unknown")) from None
            raise NodeFileError("cannot lock the node file's lock %s: %s" % (self.path, e.strerror)) from None
        self.fd = fd
        self.write_pid()

    def write_pid(self):
        """This process's pid in the lock file (for the line a second node
        prints)."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, b"%d\n" % os.getpid(), 0)

    def release(self):
        """Let go of the lock (the service stops); the file stays."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


def _read_pid(fd):
    """The pid the lock file names, or None."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if text.isdigit() else None
