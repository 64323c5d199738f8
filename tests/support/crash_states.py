"""Crash states of the append only file, replayed (ALICE, OSDI 2014;
CrashMonkey, OSDI 2018).

A kill -9 loses nothing the kernel was given; a power cut or a kernel
crash loses what the kernel had not put on the disk yet, and what it may
lose is not just "the last few bytes".  This module records every call the
persistence layer makes to the disk under a workload
(:class:`RecordingFileSystem`, a :class:`disque.io.files.FileSystem`
doing the real calls in the node's directory and logging them), with the
moment each reply left for the client; then builds every state the disk may
be in after a crash at each point of that log (:func:`crash_states`), starts
a node on each and checks it (:func:`replay`).

The model
---------

The log is a sequence of operations on inodes and on one directory:

* ``link`` (a file created), ``rename`` (``replace``), ``unlink``: directory
  operations;
* ``write`` (at an offset: the end of the file for ``open_append``, the
  descriptor's position otherwise) and ``truncate``: data operations of one
  inode;
* ``fsync`` of an inode, ``fsync_dir`` of the directory.

A crash after the first ``c`` operations leaves, for each inode, its
content as of its last fsync before ``c`` plus some of the data operations
that came after it, and for the directory its entries as of its last
durable point plus some of the directory operations after it.  Which ones
is what the file system promises, and two models are implemented:

``ordered`` (what a journaling file system such as ext4 with
``data=ordered`` does): the unsynced data operations of a file persist as a
prefix, in order, the next write possibly torn (any prefix of its bytes:
cut after 1 byte, inside a RESP header, inside a record, at a record
boundary, one byte short of its end, and at seeded random places); the
directory operations are journaled in order, so they persist as a prefix
too, and any fsync (of a file or of the directory) commits every directory
operation before it (a journal commit carries all the metadata before it).

``weak`` (the letter of POSIX, as ALICE's weakest model): a directory
operation persists only through an fsync of its directory (fsync(2): "does
not necessarily ensure that the entry in the directory containing the file
has reached disk"); otherwise any subset of the unsynced directory
operations persists, in order (an operation whose source name the subset
has not made is left out: the journal would not have it either).  The
unsynced writes of a file persist as any subset in order: a write left out
leaves a hole that reads as zeros when a later one extends the file; the
last one kept may be torn, or only its size may have reached the disk
(zeros: "garbage" in ALICE).

In both, an fsync covers every earlier change of its inode (its data, its
size: a truncate too), and nothing of any other inode.  The node file goes
through the same door into the same directory (the runtime takes
``files.OS`` too), so it is recorded as well: its directory fsync makes
the AOF's directory operations durable like any other, and it is part of
every state.  :func:`killed_state` is what kill -9 of the process leaves
(every write: the kernel has them).

Not modelled: disks that lie about fsync or change fsynced bytes (bit
rot: the fault tools' business), reordering across directories (there is
one), and more than one crash in a state (a crash during the recovery of
another is a workload of its own: ``torn-tail-restart``).  Where a crash
point has too many states to enumerate (``limit``; in the weak model all
subsets up to 4 unsynced operations of a file), a seeded sample is taken,
always with the two extremes (nothing unsynced persisted; everything).
States that are the same bytes are checked once, at the latest crash point
that yields them (its requirements are the strictest).

What a node started on a state must do
--------------------------------------

A state is *torn-only* when every file in it is a prefix of a content that
file really had (what a torn tail is); otherwise it is *damaged* (a hole,
zeros, a write kept without an earlier truncate).  The loading policy
(docs/persistence.md, "Damaged files") truncates a torn tail
(``aof-load-truncated yes``) and refuses anything else with one line.  So:

* a torn-only state must start;
* a damaged state may be refused, with a one-line ``LoadError``; then
  ``python -m disque.tools.check_aof --fix`` must make it start, and what
  follows must hold after the repair;
* every job whose ADDJOB reply left under ``appendfsync always`` before
  the crash point is there, unless a deletion of it had reached the node
  before the crash point; under ``everysec`` and ``no`` (and for jobs
  added while the AOF was off, before ``CONFIG SET appendonly yes``) the
  same for jobs acknowledged before a later completed fsync of the file
  (or a completed rewrite);
* no job is there whose ADDJOB was never sent, and every job has the body
  its ADDJOB sent;
* a RETRY 0 job a GETJOB delivered before the crash point is not queued
  again (at most once; only a controlled restart's file queues jobs);
* a job whose ACKJOB or DELJOB was acknowledged before the crash point and
  is there again is *resurrected*: not a loss (at least once), counted.

Run ``python -m tests.support.crash_states`` for the figures of every workload
under both models (``--help``: one workload, one model, more states per
point); tests/protocol/test_crash_states.py asserts them.
"""

import contextlib
import io
import itertools
import os
import random
import shutil
import time
from collections import namedtuple

import hiredis
from twisted.internet.testing import MemoryReactorClock, StringTransport

from disque import plugins
from disque.io import files
from disque.core.job import QUEUED
from disque.interfaces import LoadError
from disque.io.files import FileSystem
from disque.persistence import aof as aof_module
from disque.resp.protocol import RespProtocol
from disque.node.service import DisqueNodeService
from disque.tools import check_aof
from tests.support.memory import LOCAL_PEER, memory_config

T0 = 1_795_347_500.0  # the node's clock at the start (as tests/protocol/test_directives.py)
AOF = "disque.aof"

DIR_OPS = ("link", "rename", "unlink")
DATA_OPS = ("write", "truncate")


class Op:
    """One operation of the log.  ``inode``: the file it concerns (an
    integer); ``name``/``dst``: directory entries."""

    __slots__ = ("kind", "inode", "name", "dst", "offset", "data", "size", "note")

    def __init__(self, kind, inode=None, name=None, dst=None, offset=None, data=None, size=None, note=None):
        self.kind = kind
        self.inode = inode
        self.name = name
        self.dst = dst
        self.offset = offset
        self.data = data
        self.size = size
        self.note = note

    def __repr__(self):
        if self.kind == "write":
            return "write(#%d %s @%d +%d)" % (self.inode, self.name, self.offset, len(self.data))
        if self.kind == "truncate":
            return "truncate(#%d %s to %d%s)" % (self.inode, self.name, self.size,
                                                  ", " + self.note if self.note else "")
        if self.kind == "rename":
            return "rename(%s -> %s)" % (self.name, self.dst)
        if self.kind in ("link", "unlink"):
            return "%s(%s #%d)" % (self.kind, self.name, self.inode)
        if self.kind == "fsync_dir":
            return "fsync_dir"
        return "%s(#%d %s)" % (self.kind, self.inode, self.name)


# -- recording -------------------------------------------------------------------


class RecordingFileSystem(FileSystem):
    """The real calls, in one directory, each logged in :attr:`ops` with
    the inode and the name it concerns.  ``sync=False`` (the default) skips
    the real fsyncs: durability here is the model's, not the disk's, and
    the tests stay fast.

    The files already in the directory are the initial state, all of it on
    disk.  A file changed behind this door (the load's truncation of a torn
    tail uses ``open``) is caught when the file is opened again through it
    and logged as an unsynced ``truncate`` (``note="outside"``);
    :meth:`check_door` says whether anything else changed behind it."""

    def __init__(self, root, sync=False, ignore=("nodes.conf.lock",)):
        self.root = os.path.abspath(root)
        self.sync = sync
        # Names left out of the log (a file no one writes through this door:
        # by default the node file's lock, disque/node/nodefile_lock.py,
        # which holds a pid and no state).
        self.ignore = ignore
        self.ops = []
        self.next_inode = 0
        self.names = {}  # name -> inode, as a reader sees them now
        self.contents = {}  # inode -> bytes, as a reader sees them now
        self.fds = {}  # fd -> [inode, append, position]
        self.initial_names = {}
        self.initial_contents = {}
        for name in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, name)
            if os.path.isfile(path) and name not in ignore:
                with open(path, "rb") as f:
                    data = f.read()
                inode = self._new_inode()
                self.names[name] = self.initial_names[name] = inode
                self.contents[inode] = self.initial_contents[inode] = data

    def _new_inode(self):
        self.next_inode += 1
        return self.next_inode

    def _name(self, path):
        path = os.path.abspath(path)
        if os.path.dirname(path) != self.root:
            raise AssertionError("%s is outside the recorded directory %s" % (path, self.root))
        return os.path.basename(path)

    def _log(self, op):
        self.ops.append(op)
        return op

    def _open(self, path, append, flags_fn):
        name = self._name(path)
        fd = flags_fn(path)
        inode = self.names.get(name)
        if inode is None:
            inode = self._new_inode()
            self.names[name] = inode
            self.contents[inode] = b""
            self._log(Op("link", inode, name))
        elif not append:  # O_TRUNC on an existing file
            self.contents[inode] = b""
            self._log(Op("truncate", inode, name, size=0))
        else:
            real = os.fstat(fd).st_size
            known = len(self.contents[inode])
            if real < known:  # cut behind the door (the load's truncation of a torn tail)
                self.contents[inode] = self.contents[inode][:real]
                self._log(Op("truncate", inode, name, size=real, note="outside"))
            elif real != known:
                raise AssertionError("%s grew behind the FileSystem: %d bytes, %d known" % (name, real, known))
        self.fds[fd] = [inode, append, 0]
        return fd

    def open_append(self, path):
        return self._open(path, True, super().open_append)

    def create(self, path):
        return self._open(path, False, super().create)

    def _name_of(self, inode):
        for name, i in self.names.items():
            if i == inode:
                return name
        return "(unlinked)"

    def write(self, fd, data):
        n = super().write(fd, data)
        inode, append, pos = self.fds[fd]
        content = self.contents[inode]
        offset = len(content) if append else pos
        data = bytes(data[:n])
        self.contents[inode] = content[:offset] + b"\0" * (offset - len(content)) + data + content[offset + n:]
        self.fds[fd][2] = offset + n
        self._log(Op("write", inode, self._name_of(inode), offset=offset, data=data))
        return n

    def fsync(self, fd):
        if self.sync:
            super().fsync(fd)
        inode = self.fds[fd][0]
        self._log(Op("fsync", inode, self._name_of(inode)))

    def truncate(self, fd, size):
        super().truncate(fd, size)
        inode = self.fds[fd][0]
        content = self.contents[inode]
        self.contents[inode] = content[:size] + b"\0" * (size - len(content))
        self._log(Op("truncate", inode, self._name_of(inode), size=size))

    def close(self, fd):
        super().close(fd)
        inode = self.fds.pop(fd)[0]
        self._log(Op("close", inode, self._name_of(inode)))

    def replace(self, src, dst):
        super().replace(src, dst)
        s, d = self._name(src), self._name(dst)
        inode = self.names.pop(s)
        self.names[d] = inode
        self._log(Op("rename", inode, s, dst=d))

    def unlink(self, path):
        super().unlink(path)
        name = self._name(path)
        inode = self.names.pop(name)
        self._log(Op("unlink", inode, name))

    def fsync_dir(self, path):
        if self.sync:
            super().fsync_dir(path)
        if os.path.abspath(path or ".") != self.root:
            raise AssertionError("fsync of another directory: %s" % path)
        self._log(Op("fsync_dir"))

    def check_door(self):
        """Differences between the directory and what went through this
        door (the ``ignore`` names aside)."""
        problems = []
        real = {n for n in os.listdir(self.root) if n not in self.ignore}
        if real != set(self.names):
            problems.append("names: %s on disk, %s recorded" % (sorted(real), sorted(self.names)))
        for name in real & set(self.names):
            with open(os.path.join(self.root, name), "rb") as f:
                if f.read() != self.contents[self.names[name]]:
                    problems.append("%s: content changed behind the FileSystem" % name)
        return problems


class NoSyncFileSystem(FileSystem):
    """The nodes started on crash states: their closing fsyncs would only
    cost time."""

    def fsync(self, fd):
        pass

    def fsync_dir(self, path):
        pass


_FOUND = {}


def _strategies(interface, _real=plugins.strategies):
    """plugins.strategies, looked up once: Twisted's plugin scan costs
    more than the rest of a node's start (thousands of starts here)."""
    if interface not in _FOUND:
        _FOUND[interface] = _real(interface)
    return list(_FOUND[interface])


@contextlib.contextmanager
def node_fs(fs):
    """Nodes built in this block do their I/O through ``fs``: the AOF
    (``AOFPersistence`` takes ``files.OS`` at construction) and the node
    file (so does the runtime).  Both live in ``dir``: the node file's
    directory fsync makes the AOF's directory operations durable too."""
    saved = aof_module.OS, files.OS, plugins.strategies
    aof_module.OS = files.OS = fs
    plugins.strategies = _strategies
    try:
        yield fs
    finally:
        aof_module.OS, files.OS, plugins.strategies = saved


def build_node(directory, directives, fs=None, start=True):
    """A node service in memory (as tests/protocol/test_directives.py's ``make``):
    MemoryReactorClock at T0, ``dir`` = ``directory``.  Raises the
    LoadError of an AOF it refuses."""
    config = memory_config({"dir": str(directory), **directives})
    reactor = MemoryReactorClock()
    reactor.advance(T0)
    with node_fs(fs or NoSyncFileSystem()):
        service = DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None)
    if start:
        service.startService()
    return service


# -- a workload and what it acknowledged -----------------------------------------

Add = namedtuple("Add", "body at policy")


class History:
    """What the clients sent and what came back, positioned in the log: an
    event ``at`` k happened after the first k operations."""

    def __init__(self):
        self.bodies = set()  # ADDJOB bodies sent
        self.adds = {}  # job ID -> Add: the reply left at ``at`` under ``policy``
        self.deletes_sent = {}  # job ID -> first ``at`` an ACKJOB/DELJOB of it reached the node
        self.deletes_acked = {}  # job ID -> ``at`` its reply (:1) left
        self.delivered = {}  # job ID -> ``at`` the first GETJOB reply holding it left
        # The catalog (CATALOG records), as for jobs: SCHEDULE ADD and DEL.
        self.schedules = {}  # schedule name -> Add (body: its name): SCHEDULE ADD's +OK left at ``at``
        self.schedule_deletes_sent = {}  # name -> first ``at`` a SCHEDULE DEL of it reached the node
        self.schedule_deletes_acked = {}  # name -> ``at`` its reply (:1) left

    def sent(self, at, argv):
        name = argv[0].upper()
        if name == b"ADDJOB":
            self.bodies.add(argv[2])
        elif name in (b"ACKJOB", b"DELJOB", b"FASTACK"):
            for job_id in argv[1:]:
                self.deletes_sent.setdefault(job_id, at)
        elif name == b"SCHEDULE" and argv[1].upper() == b"DEL":
            self.schedule_deletes_sent.setdefault(argv[2], at)

    def replied(self, at, argv, reply, policy):
        name = argv[0].upper()
        if name == b"ADDJOB" and isinstance(reply, bytes) and reply.startswith(b"D-"):
            self.adds[reply] = Add(argv[2], at, policy)
        elif name in (b"ACKJOB", b"DELJOB", b"FASTACK") and len(argv) == 2 and reply == 1:
            self.deletes_acked.setdefault(argv[1], at)
        elif name == b"GETJOB" and isinstance(reply, list):
            for job in reply:
                self.delivered.setdefault(job[1], at)
        elif name == b"SCHEDULE" and argv[1].upper() == b"ADD" and reply == b"OK":
            self.schedules[argv[2]] = Add(argv[2], at, policy)
        elif name == b"SCHEDULE" and argv[1].upper() == b"DEL" and reply == 1:
            self.schedule_deletes_acked.setdefault(argv[2], at)


class RecordingTransport(StringTransport):
    """A client's transport: each reply, as it leaves, is matched with its
    request and put in the history at the current position of the log."""

    def __init__(self, client):
        super().__init__(peerAddress=LOCAL_PEER)
        self.client = client

    def write(self, data):
        super().write(data)
        self.client.received(data)

    def writeSequence(self, data):
        self.write(b"".join(data))


class Client:
    def __init__(self, session):
        self.session = session
        self.pending = []
        self.reader = hiredis.Reader()
        self.replies = []
        self.transport = RecordingTransport(self)
        self.proto = RespProtocol(session.service.runtime)
        self.proto.makeConnection(self.transport)

    def send(self, *requests):
        """Requests in one read (one batch of the node)."""
        s = self.session
        data = []
        for argv in requests:
            argv = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
            self.pending.append(argv)
            s.history.sent(len(s.fs.ops), argv)
            data.append(b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv))
        self.proto.dataReceived(b"".join(data))

    def call(self, *argv):
        before = len(self.replies)
        self.send(argv)
        return self.replies[before] if len(self.replies) > before else None

    def received(self, data):
        s = self.session
        at = len(s.fs.ops)
        p = s.service.persistence
        policy = s.service.config["appendfsync"] if p.enabled else "off"
        self.reader.feed(data)
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            self.replies.append(reply)
            s.history.replied(at, self.pending.pop(0), reply, policy)


class Session:
    """A node on a :class:`RecordingFileSystem` in ``directory``, its
    clients, and the history of what they were told."""

    def __init__(self, directory, directives, fs_class=RecordingFileSystem):
        os.makedirs(directory, exist_ok=True)
        self.directory = str(directory)
        self.directives = dict(directives)
        self.fs = fs_class(self.directory)
        self.history = History()
        self.service = build_node(self.directory, self.directives, self.fs)
        self.reactor = self.service.reactor

    def connect(self):
        return Client(self)

    def advance(self, seconds, step=0.05):
        for _ in range(int(round(seconds / step))):
            self.reactor.advance(step)

    def turn(self):
        """One reactor turn (what callLater(0) scheduled: a rewrite step)."""
        self.reactor.advance(0)

    def rewriting(self):
        return self.service.persistence.rewriting is not None

    def stop(self):
        if self.service.running:
            self.service.stopService()

    def recording(self, restart=None):
        return Recording(self.fs, self.history, self.directives, restart)


class Recording:
    """A finished workload: the log, the history, the node's directives
    (and those it restarts with), and what follows from them: the points
    after which the AOF holds a job durably, and which job must be there
    after a crash at a given point (:meth:`required`)."""

    def __init__(self, fs, history, directives, restart=None):
        self.ops = list(fs.ops)
        self.history = history
        self.directives = directives
        self.restart = directives if restart is None else restart  # what the node restarts with
        self.initial_names = dict(fs.initial_names)
        self.initial_contents = dict(fs.initial_contents)
        self.aof = directives.get("appendfilename", AOF)
        # Durable points: after op p every job acknowledged at or before p
        # is on disk as the policy promises: an fsync of the file the AOF
        # name is, or the directory's fsync after a rewrite renamed a new
        # file over it (which holds every job in memory).
        names = dict(self.initial_names)
        self.file_points = []
        self.rewrite_points = []
        self.renames = [i for i, op in enumerate(self.ops) if op.kind == "rename" and op.dst == self.aof]
        renamed = False
        for i, op in enumerate(self.ops):
            if op.kind == "link":
                names[op.name] = op.inode
            elif op.kind == "rename":
                names[op.dst] = names.pop(op.name)
                renamed = renamed or op.dst == self.aof
            elif op.kind == "unlink":
                names.pop(op.name, None)
            elif op.kind == "fsync" and names.get(self.aof) == op.inode:
                self.file_points.append(i)
            elif op.kind == "fsync_dir" and renamed:
                self.rewrite_points.append(i)
                self.file_points.append(i)
                renamed = False

    def required(self, c, kill=False):
        """Job IDs that must be there after a crash following the first
        ``c`` operations (``kill``: of the process only, the kernel keeps
        every write)."""
        h = self.history
        return {job_id for job_id, add in h.adds.items()
                if self._durable(add, c, kill) and not h.deletes_sent.get(job_id, c) < c}

    def required_schedules(self, c, kill=False):
        """Schedule names that must be there after a crash following the
        first ``c`` operations, as :meth:`required`."""
        h = self.history
        return {name for name, add in h.schedules.items()
                if self._durable(add, c, kill) and not h.schedule_deletes_sent.get(name, c) < c}

    def _durable(self, add, c, kill):
        """Whether what ``add`` acknowledged is on disk after the first
        ``c`` operations, as the policy it was answered under promises."""
        if add.policy == "torn":  # its record never was whole
            return False
        if add.policy == "always" or (kill and add.policy != "off"):
            return add.at <= c
        if kill:  # added with the AOF off: written by the rewrite that renamed its file over it
            return any(add.at <= r < c for r in self.renames)
        points = self.rewrite_points if add.policy == "off" else self.file_points
        return any(add.at <= p < c for p in points)

    def catalog_problems(self, c, node, kill=False):
        """``(missing, back)``: the schedules acknowledged as durable after
        the first ``c`` operations that ``node`` (a NodeState) lacks, and
        those whose deletion was acknowledged that it has."""
        specs = node.recurring.specs
        missing = sorted(n for n in self.required_schedules(c, kill) if n not in specs)
        back = sorted(n for n, at in self.history.schedule_deletes_acked.items() if at <= c and n in specs)
        return missing, back

    def deleted(self, c):
        """Job IDs whose ACKJOB/DELJOB reply left before crash point ``c``."""
        return {j for j, at in self.history.deletes_acked.items() if at <= c}

    def delivered(self, c):
        """Job IDs a GETJOB reply handed out before crash point ``c``."""
        return {j for j, at in self.history.delivered.items() if at <= c}


# -- crash states ------------------------------------------------------------------

MODELS = ("ordered", "weak")
LIMIT = 16  # states per crash point, at most (twice that with several directory variants)

CrashState = namedtuple("CrashState", "point files inodes damaged")


def _apply(content, op):
    if op.kind == "write":
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content += b"\0" * (op.offset - len(content))
        return content[:op.offset] + op.data + content[end:]
    if op.kind == "truncate":
        return content[:op.size] + b"\0" * (op.size - len(content))
    raise ValueError(op.kind)


def _torn(op, data):
    """``op`` cut at ``len(data)`` bytes."""
    return Op("write", op.inode, op.name, offset=op.offset, data=data)


def cuts(data, rng, extra=1):
    """Where a write may be torn: 1 byte in, inside the first RESP header
    (between ``$`` and its length, between ``\\r`` and ``\\n``), inside the
    first record, at the first record boundary, one byte short, and
    ``extra`` seeded random places.  Only places strictly inside."""
    n = len(data)
    places = {1, n - 1}
    dollar = data.find(b"$")
    if dollar >= 0:
        places.add(dollar + 1)
    cr = data.find(b"\r")
    if cr >= 0:
        places.add(cr + 1)
    # the first record's end: parse its header (*N, then N bulk strings)
    end = _first_record_end(data)
    if end:
        places.update((end - 3, end - 1, end))
    for _ in range(extra):
        if n > 2:
            places.add(rng.randrange(1, n))
    return sorted(p for p in places if 0 < p < n)


def _first_record_end(data):
    try:
        if not data.startswith(b"*"):
            return None
        i = data.index(b"\r\n")
        count = int(data[1:i])
        pos = i + 2
        for _ in range(count):
            j = data.index(b"\r\n", pos)
            length = int(data[pos + 1:j])
            pos = j + 2 + length + 2
        return pos if pos <= len(data) else None
    except ValueError:
        return None


def _data_variants(persisted, unsynced, model, rng, limit):
    """The contents an inode may hold after a crash: ``persisted`` plus
    some of the ``unsynced`` data operations, as ``model`` allows."""
    out = {}

    def add(content):
        out.setdefault(content, None)

    if model == "ordered":
        content = persisted
        add(content)
        for op in unsynced:
            if op.kind == "write":
                for cut in cuts(op.data, rng):
                    add(_apply(content, _torn(op, op.data[:cut])))
            content = _apply(content, op)
            add(content)
        return list(out)
    # weak: any subset, in order; the last one kept torn or only sized
    n = len(unsynced)
    if n <= 4:
        subsets = [s for r in range(n + 1) for s in itertools.combinations(range(n), r)]
    else:
        subsets = {tuple(range(j)) for j in range(n + 1)}  # the prefixes
        while len(subsets) < min(limit, 2 ** n):
            subsets.add(tuple(i for i in range(n) if rng.random() < 0.5))
        subsets = sorted(subsets)
    for subset in subsets:
        content = persisted
        for i in subset:
            content = _apply(content, unsynced[i])
        add(content)
        if subset:
            last = unsynced[subset[-1]]
            before = persisted
            for i in subset[:-1]:
                before = _apply(before, unsynced[i])
            if last.kind == "write":
                for cut in cuts(last.data, rng, extra=1):
                    add(_apply(before, _torn(last, last.data[:cut])))
                add(_apply(before, _torn(last, b"\0" * len(last.data))))  # the size without the data
    return list(out)


def _dir_variants(persisted, unsynced, model, rng, limit):
    """The entries (name -> inode) the directory may hold."""
    n = len(unsynced)
    subsets = [tuple(range(j)) for j in range(n + 1)]  # the prefixes
    if model == "weak" and n <= 6:
        subsets = [s for r in range(n + 1) for s in itertools.combinations(range(n), r)]
    elif model == "weak":
        subsets = set(subsets)
        while len(subsets) < limit * 2:
            subsets.add(tuple(i for i in range(n) if rng.random() < 0.5))
        subsets = sorted(subsets)
    out = []
    for subset in subsets:
        names = dict(persisted)
        ok = True
        for i in subset:
            op = unsynced[i]
            if op.kind == "link":
                names[op.name] = op.inode
            elif names.get(op.name) != op.inode:  # its source was never made
                ok = False
                break
            elif op.kind == "rename":
                names[op.dst] = names.pop(op.name)
            else:
                del names[op.name]
        if ok and names not in out:
            out.append(names)
    return out


def crash_states(recording, model, seed=0, limit=None, points=None):
    """The distinct crash states of ``recording`` under ``model`` (one of
    :data:`MODELS`): :class:`CrashState` ``(point, files, inodes,
    damaged)``, ``files`` a dict name -> bytes, ``inodes`` name -> inode,
    ``point`` the latest crash point yielding those bytes (of the crash
    points ``points``, all by default).  At most ``limit`` combinations
    per point (a seeded sample beyond, with both extremes)."""
    if model not in MODELS:
        raise ValueError(model)
    rng = random.Random(seed)
    ops = recording.ops
    limit = limit or LIMIT
    states = {}
    for c in (range(len(ops) + 1) if points is None else points):
        for state in states_at(recording, c, model, rng, limit):
            states[tuple(sorted(state.files.items()))] = state  # later points replace earlier ones
    return sorted(states.values(), key=lambda s: s.point)


def states_at(recording, c, model, rng, limit=None):
    """The crash states (:class:`CrashState`) after the first ``c``
    operations: at most ``limit`` combinations of the directory's and the
    files' variants (a seeded sample beyond, with both extremes), and at
    most twice that in all."""
    limit = limit or LIMIT
    ops = recording.ops[:c]
    # the directory
    dir_ops = [(i, op) for i, op in enumerate(ops) if op.kind in DIR_OPS]
    durable = ("fsync_dir",) if model == "weak" else ("fsync_dir", "fsync")
    d = max([i for i, op in enumerate(ops) if op.kind in durable], default=-1)
    names = dict(recording.initial_names)
    for i, op in dir_ops:
        if i < d:
            if op.kind == "link":
                names[op.name] = op.inode
            elif op.kind == "rename":
                names[op.dst] = names.pop(op.name)
            else:
                names.pop(op.name)
    dirs = _dir_variants(names, [op for i, op in dir_ops if i > d], model, rng, limit)
    # each inode's content
    inodes = sorted({ino for entries in dirs for ino in entries.values()})
    variants, pasts = {}, {}
    for ino in inodes:
        content = recording.initial_contents.get(ino, b"")
        past = [content]
        synced = max([i for i, op in enumerate(ops) if op.kind == "fsync" and op.inode == ino], default=-1)
        persisted, unsynced = content, []
        for i, op in enumerate(ops):
            if op.inode == ino and op.kind in DATA_OPS:
                content = _apply(content, op)
                past.append(content)
                if i < synced:
                    persisted = content
                else:
                    unsynced.append(op)
        variants[ino] = _data_variants(persisted, unsynced, model, rng, limit)
        pasts[ino] = past
    combos = []
    for entries in dirs:
        named = sorted(entries.items())
        choices = [variants[ino] for _, ino in named]
        total = 1
        for ch in choices:
            total *= len(ch)
        if total <= limit:
            picks = itertools.product(*choices)
        else:
            picks = [tuple(ch[0] for ch in choices), tuple(ch[-1] for ch in choices)]
            picks += [tuple(rng.choice(ch) for ch in choices) for _ in range(limit - 2)]
        for pick in picks:
            files = {name: content for (name, _), content in zip(named, pick)}
            damaged = any(not any(p.startswith(content) for p in pasts[ino])
                          for (_, ino), content in zip(named, pick))
            combos.append(CrashState(c, files, entries, damaged))
    if len(combos) > limit * 2:
        keep = combos[:1] + combos[-1:]
        combos = keep + rng.sample(combos[1:-1], limit * 2 - 2)
    return combos


def killed_state(recording, c):
    """What kill -9 of the process after the first ``c`` operations leaves:
    every one of them (the kernel has them all), as a CrashState."""
    names = dict(recording.initial_names)
    contents = dict(recording.initial_contents)
    for op in recording.ops[:c]:
        if op.kind == "link":
            names[op.name] = op.inode
        elif op.kind == "rename":
            names[op.dst] = names.pop(op.name)
        elif op.kind == "unlink":
            names.pop(op.name)
        elif op.kind in DATA_OPS:
            contents[op.inode] = _apply(contents.get(op.inode, b""), op)
    return CrashState(c, {n: contents.get(i, b"") for n, i in names.items()}, names, False)


def rewrites(recording):
    """The rewrites in the log: ``(temp inode, index of its link, index of
    its rename over the AOF, its content then)``; a temp file removed
    instead (a failed rewrite) has no rename (None, None)."""
    out = []
    content = {}
    links = {}
    for i, op in enumerate(recording.ops):
        if op.kind == "link" and ".rewrite-" in op.name:
            links[op.inode] = i
        elif op.kind in DATA_OPS:
            content[op.inode] = _apply(content.get(op.inode, b""), op)
        elif op.kind == "rename" and op.inode in links and op.dst == recording.aof:
            out.append((op.inode, links.pop(op.inode), i, content.get(op.inode, b"")))
        elif op.kind == "unlink" and op.inode in links:
            out.append((op.inode, links.pop(op.inode), None, None))
    out += [(ino, i, None, None) for ino, i in links.items()]  # never renamed nor removed
    return out


def rewrite_violations(recording, model, seed=0, limit=None):
    """Crash states in which the AOF is neither the old file (with at least
    what was fsynced to it) nor the new one whole (everything the rewrite
    wrote before its rename), at every crash point from the first
    rewrite's start to the end of the log."""
    rng = random.Random(seed)
    problems = []
    done = rewrites(recording)
    new = {ino: whole for ino, _, renamed, whole in done if renamed is not None}
    start = min([link for _, link, _, _ in done], default=len(recording.ops) + 1)
    for c in range(start, len(recording.ops) + 1):
        for state in states_at(recording, c, model, rng, limit):
            ino = state.inodes.get(recording.aof)
            content = state.files.get(recording.aof)
            if ino is None:
                if recording.aof in recording.initial_names:  # (else the file was new: see appendonly-at-run-time)
                    problems.append("crash after op %d: no %s at all" % (c, recording.aof))
            elif ino in new:
                if not content.startswith(new[ino]):
                    problems.append("crash after op %d: the new file is not whole (%d of %d bytes)"
                                    % (c, len(content), len(new[ino])))
            elif not content.startswith(content_at(recording, ino, _last_fsync(recording, ino, c))):
                problems.append("crash after op %d: the old file lost bytes it had fsynced" % c)
    return problems


def content_at(recording, inode, c):
    """What ``inode`` held after the first ``c`` operations."""
    content = recording.initial_contents.get(inode, b"")
    for op in recording.ops[:c]:
        if op.inode == inode and op.kind in DATA_OPS:
            content = _apply(content, op)
    return content


def _last_fsync(recording, inode, c):
    """The crash point right after the last fsync of ``inode`` before ``c``
    (0 if none)."""
    return max([i + 1 for i, op in enumerate(recording.ops[:c]) if op.kind == "fsync" and op.inode == inode],
               default=0)


# -- replay -------------------------------------------------------------------------


class Report:
    """What :func:`replay` found: counters, and the failures in words."""

    def __init__(self, name, model):
        self.name = name
        self.model = model
        self.states = 0
        self.points = 0
        self.started = 0
        self.refused = 0  # damaged states refused with one line (the policy)
        self.repaired = 0  # of those, started after check_aof --fix
        self.damaged = 0
        self.resurrected = 0  # states in which a job whose deletion was acknowledged is back
        self.temp_left = 0  # states in which a rewrite's temp file is still there after the restart
        self.lost = []
        self.unexpected = []
        self.redelivered = []  # RETRY 0 jobs delivered before the crash and queued again: at most once broken
        self.bad_refusals = []
        self.seconds = 0.0

    @property
    def failures(self):
        return self.lost + self.unexpected + self.redelivered + self.bad_refusals

    def line(self):
        return ("%-22s %-7s %4d states (%d damaged) from %d crash points: %d started, %d refused (damaged) "
                "and %d started after check_aof --fix, lost %d, unexpected %d, RETRY 0 queued again %d, "
                "refusals outside the policy %d, deletions back in %d, temp file left in %d, %.2f s"
                % (self.name, self.model, self.states, self.damaged, self.points, self.started, self.refused,
                   self.repaired, len(self.lost), len(self.unexpected), len(self.redelivered),
                   len(self.bad_refusals), self.resurrected, self.temp_left, self.seconds))


def materialise(directory, files):
    os.makedirs(directory)
    for name, content in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(content)


def _describe(recording, state):
    c = state.point
    last = recording.ops[c - 1] if c else "start"
    sizes = ", ".join("%s %d bytes" % (n, len(b)) for n, b in sorted(state.files.items())) or "no file"
    return "crash after op %d (%r): %s%s" % (c, last, sizes, " (damaged)" if state.damaged else "")


def replay(recording, model, workdir, name="", seed=0, limit=None, directives=None, keep=10):
    """Start a node on every crash state of ``recording`` and check it;
    returns a Report.  Each state is made in its own directory under
    ``workdir`` (``s<n>``, named in the failures), removed once checked
    unless it failed (the first ``keep`` of those stay)."""
    t = time.perf_counter()
    report = Report(name, model)
    states = crash_states(recording, model, seed=seed, limit=limit)
    report.states = len(states)
    report.points = len(recording.ops) + 1
    directives = recording.restart if directives is None else directives
    kept = 0
    for n, state in enumerate(states):
        report.damaged += state.damaged
        directory = os.path.join(str(workdir), "s%d" % n)
        materialise(directory, state.files)
        failures = len(report.failures)
        _check(report, recording, state, directory, directives, "s%d, %s" % (n, _describe(recording, state)))
        if len(report.failures) == failures or kept >= keep:
            shutil.rmtree(directory)
        else:
            kept += 1
    report.seconds = time.perf_counter() - t
    return report


def _check(report, recording, state, directory, directives, where):
    h = recording.history
    try:
        service = build_node(directory, directives)
    except LoadError as e:
        text = str(e)
        if not state.damaged:
            report.bad_refusals.append("%s: refused a torn-only state: %s" % (where, text))
            return
        if "\n" in text:
            report.bad_refusals.append("%s: the refusal is not one line: %r" % (where, text))
        report.refused += 1
        with contextlib.redirect_stdout(io.StringIO()):
            check_aof.main(["--fix", os.path.join(directory, recording.aof)])
        try:
            service = build_node(directory, directives)
        except LoadError as e2:
            report.bad_refusals.append("%s: still refused after check_aof --fix: %s" % (where, e2))
            return
        report.repaired += 1
    else:
        report.started += 1
    jobs = service.runtime.node.jobs
    for job_id in sorted(recording.required(state.point)):
        if job_id not in jobs:
            report.lost.append("%s: %s (acknowledged at %d, %s) is missing"
                               % (where, job_id.decode(), h.adds[job_id].at, h.adds[job_id].policy))
    for job in jobs.values():
        add = h.adds.get(job.id)
        if job.body not in h.bodies or (add is not None and add.body != job.body):
            report.unexpected.append("%s: %s with body %r was never added" % (where, job.id, job.body[:40]))
    report.resurrected += any(j in jobs for j in recording.deleted(state.point))
    missing, back = recording.catalog_problems(state.point, service.runtime.node)
    report.lost += ["%s: schedule %s (acknowledged at %d) is missing" % (where, name.decode(), h.schedules[name].at)
                    for name in missing]
    report.resurrected += bool(back)
    for job_id in sorted(recording.delivered(state.point)):
        job = jobs.get(job_id)
        if job is not None and job.retry == 0 and job.state == QUEUED:
            report.redelivered.append("%s: %s (RETRY 0) was delivered at %d and is queued again"
                                      % (where, job_id.decode(), h.delivered[job_id]))
    service.stopService()
    if any(".rewrite-" in f for f in os.listdir(directory)):
        report.temp_left += 1


# -- workloads ----------------------------------------------------------------------
# Deterministic: the same calls in the same order at each run (job IDs differ,
# the sizes and the order of the operations do not).  Each starts from a
# directory where the AOF already exists and is on disk (a node that ran
# before: ``prepare``), or from an empty one (``fresh=True``).

ALWAYS = {"appendonly": "yes", "appendfsync": "always"}


def one_batch(s):
    """ADDJOBs pipelined in one read: one write, one fsync, then replies."""
    c = s.connect()
    c.send(*[("ADDJOB", "q", "batch-%d" % i, 0) for i in range(16)])
    c.call("ADDJOB", "q", "after", 0)


def many_batches(s):
    """Two clients, one ADDJOB per batch, alternating."""
    a, b = s.connect(), s.connect()
    for i in range(8):
        a.call("ADDJOB", "qa", "a-%d" % i, 0)
        b.call("ADDJOB", "qb", "b-%d" % i, 0, "RETRY", 1)


def ack_delete(s):
    """ADDJOB, ACKJOB, DELJOB and FASTACK mixed, one at a time and in
    batches; ends with SHUTDOWN REWRITE-AOF (a blocking rewrite)."""
    c = s.connect()
    c.send(*[("ADDJOB", "q", "mix-%d" % i, 0) for i in range(6)])
    ids = [r for r in c.replies if isinstance(r, bytes)]
    c.call("ACKJOB", ids[0])
    c.call("DELJOB", ids[1])
    c.send(("ADDJOB", "q", "mix-6", 0), ("ACKJOB", ids[2]), ("ADDJOB", "q", "mix-7", 0), ("DELJOB", ids[3]))
    c.call("FASTACK", ids[4])
    c.call("ADDJOB", "q", "mix-8", 0)
    c.call("SHUTDOWN", "REWRITE-AOF")


def rewrite_in_traffic(s):
    """BGREWRITEAOF one job per reactor turn while ADDJOB and ACKJOB go on:
    records of the meantime go to the live file and to the rewrite's
    buffer."""
    c = s.connect()
    ids = [c.call("ADDJOB", "q", "old-%d" % i, 0) for i in range(5)]
    c.call("BGREWRITEAOF")
    i = 0
    while s.rewriting():
        c.call("ADDJOB", "q", "during-%d" % i, 0)
        if i < len(ids):
            c.call("ACKJOB", ids[i])
        i += 1
        s.turn()
    c.call("ADDJOB", "q", "after", 0)


def add_during_rewrite(s, c):
    """One ADDJOB per reactor turn while the rewrite runs, one after it."""
    i = 0
    while s.rewriting():
        c.call("ADDJOB", "q", "during-%d" % i, 0)
        i += 1
        s.turn()
    c.call("ADDJOB", "q", "after", 0)


def schedules(s):
    """SCHEDULE ADD and DEL among ADDJOBs (CATALOG records among LOADJOBs),
    then BGREWRITEAOF one job per reactor turn with a schedule and a job
    added each turn: the rewrite writes the catalog first, the records of
    the meantime go to the live file and to the rewrite's buffer.  (The
    schedules run at 03:00: none is due while the workload runs.)"""
    c = s.connect()
    for i in range(3):
        c.call("SCHEDULE", "ADD", "before-%d" % i, "sq", "run", "CRON", "0 3 * * *")
        c.call("ADDJOB", "q", "old-%d" % i, 0)
    c.call("SCHEDULE", "DEL", "before-0")
    c.call("BGREWRITEAOF")
    i = 0
    while s.rewriting():
        c.call("SCHEDULE", "ADD", "during-%d" % i, "sq", "run", "CRON", "0 3 * * *")
        c.call("ADDJOB", "q", "during-%d" % i, 0)
        i += 1
        s.turn()
    c.call("SCHEDULE", "DEL", "before-1")
    c.call("SCHEDULE", "ADD", "after", "sq", "run", "CRON", "0 3 * * *")


def appendonly_at_run_time(s):
    """Jobs added with the AOF off, then CONFIG SET appendonly yes (a
    rewrite writes them, one per turn) with ADDJOBs meanwhile."""
    c = s.connect()
    for i in range(4):
        c.call("ADDJOB", "q", "off-%d" % i, 0)
    c.call("CONFIG", "SET", "appendonly", "yes")
    add_during_rewrite(s, c)


def everysec(s):
    """Batches 0.3 s apart: the file is fsynced once a second, from the
    tick."""
    c = s.connect()
    for i in range(10):
        c.call("ADDJOB", "q", "es-%d" % i, 0)
        if i % 3 == 2:
            c.call("ACKJOB", c.replies[-2])
        s.advance(0.3)


def no_fsync(s):
    """appendfsync no: only the rewrite and the close fsync."""
    c = s.connect()
    for i in range(2):
        c.call("ADDJOB", "q", "no-%d" % i, 0)
    c.call("BGREWRITEAOF")
    add_during_rewrite(s, c)


def torn_tail_restart(s):
    """A second crash: the node starts on a file with a torn tail (the
    load cuts it), then appends."""
    c = s.connect()
    for i in range(4):
        c.call("ADDJOB", "q", "again-%d" % i, 0)


def controlled_restart(s):
    """The start after SHUTDOWN REWRITE-AOF (aof-enqueue-jobs-once yes):
    the jobs come back queued, RETRY 0 ones too; two are delivered, one
    per reactor turn (with the AOF on, while the rewrite that drops the
    marker runs, one job per turn)."""
    c = s.connect()
    c.call("GETJOB", "NOHANG", "FROM", "q")
    s.turn()
    c.call("GETJOB", "NOHANG", "FROM", "q")
    while s.rewriting():
        s.turn()
    c.call("ADDJOB", "q", "after", 0)


Workload = namedtuple("Workload", "run directives before restart")

REWRITE_STEP_1 = dict(ALWAYS, persistence="aof:rewrite-step=1")

# ``before``: what the directory holds when the recording starts (all of it
# on disk): "aof" (a node ran there with the AOF on: the file exists, empty,
# beside the node file), "no-aof" (it ran with the AOF off: the node file
# only), "torn" (its AOF holds two jobs and a torn third), "controlled" and
# "controlled-no-aof" (a file SHUTDOWN REWRITE-AOF wrote with
# aof-enqueue-jobs-once yes: three queued RETRY 0 jobs), None (empty).
# ``restart``: the directives of the nodes started on the crash states
# (None: the workload's).
WORKLOADS = {
    "one-batch": Workload(one_batch, ALWAYS, "aof", None),
    "many-batches": Workload(many_batches, ALWAYS, "aof", None),
    "ack-delete": Workload(ack_delete, ALWAYS, "aof", None),
    "rewrite-in-traffic": Workload(rewrite_in_traffic, REWRITE_STEP_1, "aof", None),
    "schedules": Workload(schedules, REWRITE_STEP_1, "aof", None),
    # (restarted with the AOF on: CONFIG REWRITE, or the file, says so by then)
    "appendonly-at-run-time": Workload(appendonly_at_run_time, dict(REWRITE_STEP_1, appendonly="no"), "no-aof",
                                       REWRITE_STEP_1),
    "everysec": Workload(everysec, {"appendonly": "yes", "appendfsync": "everysec"}, "aof", None),
    "no": Workload(no_fsync, {"appendonly": "yes", "appendfsync": "no", "persistence": "aof:rewrite-step=1"}, "aof",
                   None),
    "torn-tail-restart": Workload(torn_tail_restart, ALWAYS, "torn", None),
    "first-start": Workload(one_batch, ALWAYS, None, None),
    # a node that ran with the AOF off restarted with appendonly yes: the file is new
    "appendonly-in-config": Workload(one_batch, ALWAYS, "no-aof", None),
    "controlled-restart": Workload(controlled_restart, REWRITE_STEP_1, "controlled", None),
    "controlled-restart-no-aof": Workload(controlled_restart, {}, "controlled-no-aof", None),
}


class _Caller:
    """Commands to a node outside any recording (the life before)."""

    def __init__(self, service):
        self.transport = StringTransport(peerAddress=LOCAL_PEER)
        self.proto = RespProtocol(service.runtime)
        self.proto.makeConnection(self.transport)
        self.reader = hiredis.Reader()

    def call(self, *argv):
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
        self.proto.dataReceived(b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv))
        self.reader.feed(self.transport.value())
        self.transport.clear()
        return self.reader.gets()


def prepare(directory, before):
    """Make ``directory`` hold what ``before`` says (see WORKLOADS); returns
    the jobs of that life, ``{job ID: Add}`` (at 0: before the recording)."""
    os.makedirs(directory)
    if before is None:
        return {}
    aof_on = before in ("aof", "torn", "controlled")
    service = build_node(directory, ALWAYS if aof_on else {})
    c = _Caller(service)
    jobs = {}
    if before == "torn":
        for i in range(3):
            body = b"before-%d" % i + b"." * (300 if i == 2 else 0)  # the third longer than a new record
            job_id = c.call("ADDJOB", "q", body, 0)
            jobs[job_id] = Add(body, 0, "always" if i < 2 else "torn")  # the third is torn below
    elif before.startswith("controlled"):
        for i in range(3):
            job_id = c.call("ADDJOB", "q", "queued-%d" % i, 0, "RETRY", 0)
            jobs[job_id] = Add(b"queued-%d" % i, 0, "always" if aof_on else "off")
        c.call("CONFIG", "SET", "aof-enqueue-jobs-once", "yes")
        c.call("SHUTDOWN", "REWRITE-AOF")
    service.stopService()
    if before == "torn":
        path = os.path.join(directory, AOF)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 100)
    return jobs


def record(name, directory, fs_class=RecordingFileSystem):
    """Run workload ``name`` in ``directory`` (made as its ``before``
    says); returns its Recording.  The node is stopped at the end (its
    closing fsync and close are in the log too)."""
    w = WORKLOADS[name]
    directory = str(directory)
    before = prepare(directory, w.before)
    s = Session(directory, w.directives, fs_class)
    for job_id, add in before.items():  # acknowledged in the life before, on disk since
        s.history.bodies.add(add.body)
        s.history.adds[job_id] = add
    w.run(s)
    s.stop()
    problems = s.fs.check_door()
    if problems:
        raise AssertionError("the node wrote behind the FileSystem: %s" % "; ".join(problems))
    return s.recording(w.restart)


def main(argv=None):
    """Every workload under both models, one line each (docs/reliability.md,
    "Crash states")."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    ap.add_argument("--model", action="append", choices=MODELS)
    ap.add_argument("--limit", type=int, default=LIMIT, help="states per crash point (a seeded sample beyond)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true", help="every failure, not the first 3")
    args = ap.parse_args(argv)
    failed = 0
    total, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        for n, name in enumerate(args.workload or WORKLOADS):
            rec = record(name, os.path.join(tmp, "w%d" % n))
            for model in args.model or MODELS:
                report = replay(rec, model, os.path.join(tmp, "w%d-%s" % (n, model)), name, seed=args.seed,
                                limit=args.limit)
                print(report.line(), flush=True)
                failed += bool(report.failures)
                for failure in report.failures[:None if args.verbose else 3]:
                    print("    " + failure)
    print("%.1f s in all (%.1f s of this process' CPU)" % (time.perf_counter() - total, time.process_time() - cpu))
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
