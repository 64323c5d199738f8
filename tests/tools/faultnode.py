"""Run a node (``twistd ... disque ...``) whose file layer logs what it made
durable, for the power-cut nemesis of ``tests/tools/faults.py``.

    python tests/tools/faultnode.py SYNCLOG -n --pidfile= -l LOG disque --dir DIR ...

Everything after SYNCLOG is twistd's command line.  Before twistd runs, the
methods of :class:`disque.io.files.FileSystem` (the one door the
AOF and the node file have to the disk, so every instance, ``files.OS``
included) are wrapped to append one line per event to SYNCLOG, with a
single ``write(2)`` on an ``O_APPEND`` descriptor (whole lines, also from
the ``everysec`` fsync thread, and on disk once written: a kill -9 of
this process cannot lose them):

``open DEV:INO SIZE PATH``
    ``create`` or ``open_append`` opened the file: SIZE bytes of it are
    taken as durable (0 for a new file; an existing one is what survived
    the last cut);
``fsync DEV:INO SIZE``
    an fsync of the file succeeded; SIZE is its size *before* the call,
    all of which the fsync covered;
``rename SRC DST SAVED``
    before ``replace(SRC, DST)``: the file at DST (if any) was hard-linked
    to SAVED (``-``: there was none) so the rename can be undone;
``fsync_dir DIR``
    the directory was fsynced: its renames are durable (their SAVED links
    are removed then).

``tests/tools/faultdisk.py`` (:func:`power_cut`) reads the log after the
process is killed and cuts the files back to what a power cut may leave.
"""

import os
import sys
import threading

_fd = None
_lock = threading.Lock()
_pending = {}  # directory -> SAVED links of renames not yet made durable


def _log(*fields):
    os.write(_fd, (" ".join(str(f) for f in fields) + "\n").encode())


def _ident(st):
    return "%d:%d" % (st.st_dev, st.st_ino)


def install(synclog):
    """Wrap FileSystem's methods to log to ``synclog``."""
    global _fd
    from disque.io import files

    _fd = os.open(synclog, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    fs = files.FileSystem
    orig_create, orig_open_append = fs.create, fs.open_append
    orig_fsync, orig_replace, orig_fsync_dir = fs.fsync, fs.replace, fs.fsync_dir

    def opened(fd, path):
        st = os.fstat(fd)
        _log("open", _ident(st), st.st_size, os.path.abspath(path))
        return fd

    def create(self, path):
        return opened(orig_create(self, path), path)

    def open_append(self, path):
        return opened(orig_open_append(self, path), path)

    def fsync(self, fd):
        st = os.fstat(fd)
        orig_fsync(self, fd)
        _log("fsync", _ident(st), st.st_size)

    def replace(self, src, dst):
        src, dst = os.path.abspath(src), os.path.abspath(dst)
        saved = "-"
        if os.path.exists(dst):
            saved = "%s.faultnode-saved-%d" % (dst, os.stat(dst).st_ino)
            if not os.path.exists(saved):
                os.link(dst, saved)
        _log("rename", src, dst, saved)
        with _lock:
            _pending.setdefault(os.path.dirname(dst), []).append(saved)
        orig_replace(self, src, dst)

    def fsync_dir(self, path):
        path = os.path.abspath(path or ".")
        orig_fsync_dir(self, path)
        with _lock:
            saved = _pending.pop(path, [])
        _log("fsync_dir", path)
        for s in saved:
            if s != "-":
                try:
                    os.unlink(s)
                except OSError:
                    pass

    fs.create, fs.open_append, fs.fsync = create, open_append, fsync
    fs.replace, fs.fsync_dir = replace, fsync_dir


def main():
    install(sys.argv[1])
    sys.argv = ["twistd"] + sys.argv[2:]
    from twisted.scripts.twistd import run

    run()


if __name__ == "__main__":
    main()
