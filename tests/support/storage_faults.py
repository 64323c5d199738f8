"""A file layer that fails on demand (disque/io/files.py): a disk
with ``room`` bytes left (writes beyond it are short, then fail with
ENOSPC), fsyncs that fail with EIO, truncates that fail.  Every call is
made for real on the real file descriptors; only the failures are
invented."""

import errno
import os

from disque.io.files import FileSystem


class FaultyFileSystem(FileSystem):
    def __init__(self):
        self.room = None  # bytes writes may still add (None: no limit)
        self.fsync_error = None  # errno fsync fails with (None: it works)
        self.truncate_error = None
        self.writes = 0
        self.fsyncs = []  # the fds fsynced (successfully)
        self.failed_fsyncs = 0

    def full(self, room=0):
        self.room = room

    def free(self):
        self.room = None

    def write(self, fd, data):
        self.writes += 1
        if self.room is None:
            return super().write(fd, data)
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = super().write(fd, bytes(data[:self.room]))
        self.room -= n
        return n

    def fsync(self, fd):
        if self.fsync_error is not None:
            self.failed_fsyncs += 1
            raise OSError(self.fsync_error, os.strerror(self.fsync_error))
        super().fsync(fd)
        self.fsyncs.append(fd)

    def fsync_dir(self, path):
        if self.fsync_error is not None:
            self.failed_fsyncs += 1
            raise OSError(self.fsync_error, os.strerror(self.fsync_error))
        super().fsync_dir(path)

    def truncate(self, fd, size):
        if self.truncate_error is not None:
            raise OSError(self.truncate_error, os.strerror(self.truncate_error))
        super().truncate(fd, size)
