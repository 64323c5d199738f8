"""The storage side of the fault suite (``tests/tools/faults.py``): small tmpfs
disks that can be filled, damage done to an AOF between a kill and a
restart, and the cut of a node's files back to what a power cut leaves.

* :class:`Disks`: one tmpfs per node directory (``mount -t tmpfs``, root
  only).  Invariant: once :meth:`Disks.close` ran -- from ``try/finally``,
  ``atexit`` and SIGTERM/SIGINT -- none of its mounts is left (a mount
  still busy is detached with ``umount -l``, freed when its last user
  exits).  :func:`fill` takes the free space of one with a filler file,
  :func:`free` gives it back.
* :func:`damage`: a torn tail, a truncation in the middle, or bit flips
  in the middle of a file.
* :func:`power_cut`: reads the log ``tests/tools/faultnode.py`` kept of a
  killed node's fsyncs and renames, undoes the renames no directory fsync
  made durable and cuts every file back to the size its last fsync
  covered: the state a power cut may leave (the worst one: nothing the
  kernel had not been asked to flush survives).
"""

import atexit
import errno
import os
import shutil
import signal
import subprocess
import tempfile

FILLER = "filler"
CHUNK = 1 << 20


def _run(*cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    return p.returncode, p.stdout.strip()


def unavailable():
    """Why tmpfs disks cannot be mounted here (a sentence), or None."""
    if os.geteuid() != 0:
        return "tmpfs mounts need root (running as uid %d)" % os.geteuid()
    for tool in ("mount", "umount"):
        if shutil.which(tool) is None:
            return "%s is not installed" % tool
    probe = tempfile.mkdtemp(prefix="disque-mount-probe-")
    try:
        rc, out = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe)
        if rc != 0:
            return "cannot mount a tmpfs here: %s" % (out or "exit %d" % rc)
        _run("umount", probe)
        return None
    finally:
        os.rmdir(probe)


def mounted(path):
    """True when ``path`` is a mount point (per /proc/self/mounts)."""
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


class Disks:
    """tmpfs mounts made by this process."""

    def __init__(self):
        self.points = []
        self.previous = {}
        self.hooked = False

    def mount(self, path, size):
        """A tmpfs of ``size`` bytes at ``path`` (created if needed)."""
        if not self.hooked:
            self.hooked = True
            atexit.register(self.close)
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, self._on_signal)
        os.makedirs(path, exist_ok=True)
        path = os.path.realpath(path)
        rc, out = _run("mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % size, "tmpfs", path)
        if rc != 0:
            raise RuntimeError("mount -t tmpfs %s: %s" % (path, out))
        self.points.append(path)
        return path

    def _on_signal(self, sig, frame):
        self.close()
        previous = self.previous.get(sig)
        if callable(previous) and previous not in (signal.default_int_handler,):
            previous(sig, frame)  # (the partitioner's: removes its chain, exits)
        raise SystemExit(128 + sig)

    def umount(self, path):
        """Unmount ``path``: at once, or detached (``-l``) while a process
        still uses it."""
        if path not in self.points:
            return
        self.points.remove(path)
        if _run("umount", path)[0] != 0 and mounted(path):
            _run("umount", "-l", path)

    def close(self):
        """Unmount everything; idempotent."""
        for path in reversed(list(self.points)):
            self.umount(path)
        if self.hooked:
            self.hooked = False
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
            self.previous = {}


def fill(path, slack=0):
    """Take the free space of the file system of directory ``path`` with a
    filler file, leaving about ``slack`` bytes (the file system's blocks
    decide): the next writes there are short, then fail with ENOSPC.
    Returns the bytes taken."""
    st = os.statvfs(path)
    want = max(0, st.f_bavail * st.f_frsize - slack)
    fd = os.open(os.path.join(path, FILLER), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    done = 0
    block = b"\0" * CHUNK
    try:
        while done < want:
            try:
                n = os.write(fd, block[:min(CHUNK, want - done)])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            if n <= 0:
                break
            done += n
    finally:
        os.close(fd)
    return done


def free(path):
    """Remove the filler of directory ``path``."""
    try:
        os.unlink(os.path.join(path, FILLER))
    except FileNotFoundError:
        pass


# -- damage --------------------------------------------------------------------

DAMAGE = ("tail", "middle", "flip")


def damage(path, kind, rng):
    """Damage the file at ``path``; returns what was done (a dict).

    ``tail``: cut it within its last 200 bytes (a torn last record, as a
    crash in the middle of a write leaves); ``middle``: cut it between 25%
    and 75% of its length (every record after is gone); ``flip``: flip 1-8
    random bits between 25% and 75% of its length (a record in the middle
    is wrong, the file goes on)."""
    size = os.path.getsize(path)
    if size < 16:
        return {"kind": kind, "size": size, "skipped": "file too small"}
    if kind == "tail":
        at = rng.randrange(max(1, size - 200), size)
        os.truncate(path, at)
        return {"kind": kind, "size": size, "cut_at": at}
    lo, hi = size // 4, max(size // 4 + 1, 3 * size // 4)
    if kind == "middle":
        at = rng.randrange(lo, hi)
        os.truncate(path, at)
        return {"kind": kind, "size": size, "cut_at": at}
    if kind == "flip":
        flips = []
        with open(path, "r+b") as f:
            for _ in range(rng.randint(1, 8)):
                at, bit = rng.randrange(lo, hi), rng.randrange(8)
                f.seek(at)
                byte = f.read(1)[0]
                f.seek(at)
                f.write(bytes([byte ^ (1 << bit)]))
                flips.append([at, bit])
        return {"kind": kind, "size": size, "flips": sorted(flips)}
    raise ValueError("unknown damage %r" % kind)


# -- power cut -----------------------------------------------------------------

def read_synclog(path):
    """The events of a ``tests/tools/faultnode.py`` log: a list of lists of
    fields (a line cut by the kill is dropped)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    return [line.split(" ") for line in lines[:-1] if line]  # (the last piece has no newline: torn)


def durable_state(events):
    """What the log says survives a power cut, as ``(synced, renames)``:
    ``synced`` maps ``DEV:INO`` to the bytes of the file its last fsync
    covered (or its size when opened: what it had survived); ``renames``
    lists ``(src, dst, saved)`` of the renames no ``fsync_dir`` of their
    directory followed, oldest first."""
    synced = {}
    renames = []
    for ev in events:
        kind = ev[0]
        if kind == "open" and len(ev) >= 4:
            synced[ev[1]] = int(ev[2])
        elif kind == "fsync" and len(ev) == 3:
            synced[ev[1]] = max(synced.get(ev[1], 0), int(ev[2]))
        elif kind == "rename" and len(ev) == 4:
            renames.append(tuple(ev[1:]))
        elif kind == "fsync_dir" and len(ev) == 2:
            renames = [r for r in renames if os.path.dirname(r[1]) != ev[1]]
    return synced, renames


def power_cut(directory, synclog):
    """Bring the files of ``directory`` (a killed node's) back to what a
    power cut may leave, from its ``tests/tools/faultnode.py`` log: renames not
    made durable undone (newest first: the renamed file back to its old
    name, the file it replaced back in place), then every file the log
    knows cut to the size its last fsync covered.  Returns what was done
    (a dict: ``undone`` renames, ``cut`` {file: [size, cut to]})."""
    synced, renames = durable_state(read_synclog(synclog))
    undone = []
    for src, dst, saved in reversed(renames):
        if saved != "-" and os.path.exists(saved) and os.path.exists(dst) and \
                os.path.samefile(saved, dst):
            os.unlink(saved)  # (killed before the rename itself: nothing to undo)
            continue
        if os.path.exists(dst):
            os.replace(dst, src)
        if saved != "-" and os.path.exists(saved):
            os.replace(saved, dst)
        undone.append([src, dst])
    cut = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if ".faultnode-saved-" in name:  # a link for a rename that never came
            os.unlink(path)
            continue
        if not os.path.isfile(path):
            continue
        st = os.stat(path)
        ident = "%d:%d" % (st.st_dev, st.st_ino)
        if ident not in synced:
            continue  # not written through the node's file layer (a log, say)
        keep = min(st.st_size, synced[ident])
        if keep < st.st_size:
            os.truncate(path, keep)
            cut[name] = [st.st_size, keep]
    return {"undone": undone, "cut": cut}
