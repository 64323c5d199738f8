"""Golden tests: replay the original server's transcripts byte for byte.

/work/shared/reference/*.md hold raw replies captured from the original
Disque 1.0-rc1 (format: README.md there; parser: ``golden.py``).  Each file
below is replayed, in file order, against a fresh real node
(``twistd -n disque``) started with the same config the original had
(port, bind 127.0.0.1, dir, appendonly no, maxmemory 8gb).  We send exactly
the ``sent`` bytes, after substituting identities that differ on every run:

* job IDs: learned from our replies (ADDJOB, and wherever a reply carries an
  ID the transcript did not show being created, e.g. a GETJOB woken by
  another client), the original node ID (learned from CLUSTER MYID at the
  start), the node's port, its directory and the client addresses.  IDs are
  40 bytes, so lengths do not change; for the others RESP lengths are
  recomputed.

Each reply is then classified as

* ``exact``: our bytes equal the captured bytes (after those substitutions);
* ``normalized``: the reply contains values the README documents as varying
  (ctime, ttl in SHOW, next-requeue-within, next-awake-within, TIME, INFO
  counters and process fields, CLIENT LIST addresses/ages, SLOWLOG times and
  durations (hence which commands were slow), MONITOR timestamps, QSTAT
  age/idle, SCAN cursors and order): we parse both
  replies, compare structure, field names and RESP types exactly, check the
  varying values lie in a sane range and compare everything else exactly
  (SCANs: the set of names/IDs over a complete iteration, plus the shape of
  every reply);
* ``known``: a listed difference, see KNOWN_DIFFERENCES below (checked as
  precisely as the difference allows).  Reasons say what kind: deliberate,
  "timing:" (a race the original's C nodes win against the client's next
  command and our Python nodes may lose; listed in RACES, so the block may
  also match) or "BUG:" (our server is wrong; the server code is fixed
  elsewhere, the entry's check pins our current reply);
* ``MISMATCH``: anything else; the test fails and shows the command, the
  expected bytes and ours.

Some blocks need other connections or other clients acting meanwhile; the
transcripts say so in words (tags, titles, notes).  The tables under
"Scenario" spell out how each such sentence is reproduced.  Nothing is
skipped: a block or prose line we do not know how to replay fails the test,
and so does a title naming a delay ("0.3s later") without a BEFORE entry.

The 3-node sections of cluster.md (blocks tagged ``[A:7912]``, ``[B:7913]``,
``[C:7914]``, and the CLUSTER RESET section after them) run against three
more fresh nodes, started (with the same config) when the first such block
comes; the transcript itself MEETs them.  Their node IDs (learned with
CLUSTER MYID; C's new ID after CLUSTER RESET HARD from the "myself" line of
CLUSTER NODES) and ports are substituted like the single node's: ports in
the sent arguments (CLUSTER MEET) and, in replies, a bulk that is exactly an
original port (HELLO) and ``127.0.0.1:<port> `` in CLUSTER NODES text; our
ports have another number of digits, so lengths are recomputed.  The
cluster's varying values are normalized too:

* CLUSTER NODES: lines compared as a set (the original lists nodes in the
  order of its hash table of random IDs); pong_received is a recent ms
  timestamp (0 exactly where the original says 0); a handshake node's ID is
  a random temporary one on both sides (any 40 hex digits);
* CLUSTER INFO: cluster_stats_messages_sent/received are counters (an
  integer, positive where the original's is; ours may count the MEET
  already sent when the original's cron had not yet); the rest exact;
* HELLO: the version and our ID exact, the node entries as a set (hash
  table order again);
* SHOW / JSCAN records: nodes-delivered and nodes-confirmed as sets (hash
  table order); where the replication level leaves a choice (REPLICATE 2 in
  a 3-node cluster) the replica is picked at random, so the set must have
  the original's size, contain the answering node (it holds a copy) and the
  job's creator exactly when the original's does, and otherwise only nodes
  of the cluster; next-requeue-within / next-awake-within shrink with the
  time since the job was created or delivered (bounded by our record's
  ctime), and for an acked job next-awake-within is the next GC attempt
  (at most a few seconds away); a record the original showed a while after
  creating the job (cluster.md's final JSCAN: its ttl is more than 3 s
  below the TTL the job ID encodes) has our ttl counted down from that TTL
  by our job's age, as our replay runs at its own pace;
* random choices of our server the later blocks depend on: EXPECTED_ADJUST
  (which copy the leaving node C has queue its job).

The federation section (NEEDJOBS / YOURJOBS) is replayed like the others.

Run with ``-s`` to see the per-file summary.

Run with ``-s`` to see the per-file summary.
"""

import os
import re
import select
import socket
import time

import pytest

import golden
from golden import encode, encode_command, parse_reply, split_requests
from support import NodeProcess, free_port

ORIGINAL_NODE_ID = b"33f36033a560e0980d7d71c8fc8c0db81156cc5e"
ORIGINAL_PORT = b"7911"
ORIGINAL_DIR = b"/srv/disque/7911x"
SILENCE = 0.3  # seconds we wait for "nothing more within Xs" (the files say 0.5 / 1.5)
READ_TIMEOUT = 5.0

JOB_ID = re.compile(rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")
JOB_ID_FULL = re.compile(rb"\AD-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}\Z")

# The 3-node sections of cluster.md: tag letter -> (original port, original
# node ID).  C's ID after CLUSTER RESET HARD is learned from the reply.
ORIGINAL_CLUSTER = {
    "A": (b"7912", b"a79cedd469334da389570835231e423b68431d47"),
    "B": (b"7913", b"7534ec2ddbb6aec8784ff6fb3e21e82e60e76052"),
    "C": (b"7914", b"af0e5b0c7954bac55af9aba36af3fe520f5170e4"),
}
CLUSTER_TAG = re.compile(r"\A([ABC]):(\d+)\Z")
NODE_ID = re.compile(rb"\A[0-9a-f]{40}\Z")

FILES = [
    ("jobs.md", None),
    ("getjob.md", None),
    ("queues.md", None),
    ("scan-pause.md", None),
    ("admin.md", None),
    ("errors.md", None),
    # The single node part, then the 3-node sections on three more nodes.
    ("cluster.md", None),
]


# ======================================================================
# Known differences: ONE table, block title or command -> reason.
#
# Block keys are "file: command (title)", "file: title", "file: [tag] command"
# or "file: command" (tried in that order);
# "INFO field <name>" keys are INFO fields, wherever INFO shows them.  An
# entry may name a check: the reply must then differ from the original in
# exactly the described way.  An entry whose block matches the original
# again makes the test fail, so the table cannot go stale.
# ======================================================================


KNOWN_DIFFERENCES = {
    # -- deliberate ---------------------------------------------------------
    "INFO field gcc_version":
        "the GCC that built the Python interpreter, 0.0.0 if not GCC (format checked: x.y.z)",
    "INFO field runtime":
        "ours only: the Python implementation and version running the node",
    "INFO field mem_allocator":
        "Python's allocator, not jemalloc-4.0.3 (checked: non-empty)",
    "admin.md: DEBUG STRUCTSIZE":
        "C struct sizes of the original have no Python equivalent (checked: a bulk "
        "'bits:64 job:<n> ...' line)",
    # -- timing: a race the original's C nodes win against the client's
    # next command and our Python nodes may lose.  Both outcomes pass (see
    # RACES); the check pins the intermediate state we may show.
    "cluster.md: right after ACKJOB on A":
        "timing: the GC of an acked job (SETACK to B and C, their GOTACKs, DELJOB: three bus "
        "hops) may still be running when the client's next command arrives; the original "
        "had already deleted the job (checked: $-1, or the job acked, nodes-confirmed a "
        "subset of nodes-delivered)",
    "cluster.md: on B right after ACKJOB on A":
        "timing: as for A, B may not have received A's SETACK / DELJOB yet (checked: $-1, "
        "or the job acked, or not yet acked)",
    "cluster.md: SHOW after ACKJOB of unknown ID (cluster)":
        "timing: the dummy ACK goes once B and C both answered A's broadcast SETACK (two "
        "bus hops); it may still be there (checked: $-1, or the dummy: that ID, acked, no "
        "queue, no nodes-delivered, nodes-confirmed A)",
    "cluster.md: on B after FASTACK on A":
        "timing: A's DELJOB to B (one bus hop) may arrive after the client's SHOW on B, "
        "which our B may then serve first (checked: $-1, or the job not acked)",
    "cluster.md: CLUSTER INFO (immediately after MEET)":
        "timing: our CLUSTER MEET connects at once (the original waits for its next 100 ms "
        "cron), so a handshake may already be complete when the next command arrives "
        "(checked: 3 known nodes, cluster_size = 1 + cluster_reachable_nodes, at most 3)",
    "cluster.md: [B:7913] PAUSE pbq state":
        "timing: A's PAUSE ... bcast reaches B (one bus hop) after the client's next command "
        "on B, which our B then serves first (checked: the state the broadcast set, or the "
        "one before it)",
    "cluster.md: [B:7913] ADDJOB pbq z 0":
        "timing: rarely, A's PAUSE ... bcast has not reached B even two commands later, and "
        "B takes the job (checked: the original's -PAUSED, or a job ID; that job is then "
        "removed again with FASTACK on a helper connection to B, so that the later blocks "
        "see the original's jobs)",
    "cluster.md: [B:7913] QSTAT fedq":
        "timing: import-rate is the original's ceil(jobs * 1000 / max(ms since the window "
        "started, 50)); the window starts when B's GETJOB first asked, so the figure depends "
        "on how many ms the import and this QSTAT took: the original's 20 means <= 50 ms, our "
        "Python nodes may take a little longer (checked: 1 <= import-rate <= 20, all else as "
        "the original)",
    "cluster.md: C (no jobs in pbq)":
        "timing: as for B: the broadcast may reach C after the client's command (checked: "
        "in, or none)",
    # -- deliberate, in the cluster: nodes known to hold a copy of a job are
    # in its nodes-delivered (disque/core/clustered.py _merge_delivered,
    # commit e695698), so that QUEUED, SETACK and DELJOB reach every copy.
    "cluster.md: [B:7913] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1":
        "deliberate: a job moved by federation has the importing node in nodes-delivered, on "
        "the importer (_on_yourjobs) and on the source (_on_needjobs); the original keeps the "
        "source's list, A alone (checked: nodes-delivered is A and B, all else as the original)",
    "cluster.md: [A:7912] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1":
        "deliberate, consequence of the above: B's ACKJOB (delivered A, B) sends SETACK to A, "
        "so A's copy is acked and collected; the original's B (delivered A only, confirmed B: "
        "the same count) deletes its copy without telling A, whose copy stays active and "
        "would be delivered again after RETRY (checked: nodes-delivered A and B, state acked, "
        "or still active while the SETACK is in flight, or $-1 once collected)",
    "cluster.md: [A:7912] INFO jobs":
        "deliberate, consequence of the above: A's copy of the federated job was collected "
        "(checked: registered_jobs one less than the original's)",
    "cluster.md: [A:7912] JSCAN 0 COUNT 100 REPLY all":
        "deliberate, consequence of the above: A's copy of the federated job (fedq) was "
        "collected (checked: the iteration has every other job of the original, with the "
        "usual record rules, and not that one)",
}

# Known differences that are races: the block may also match the original.
RACES = {
    "cluster.md: right after ACKJOB on A",
    "cluster.md: on B right after ACKJOB on A",
    "cluster.md: SHOW after ACKJOB of unknown ID (cluster)",
    "cluster.md: on B after FASTACK on A",
    "cluster.md: CLUSTER INFO (immediately after MEET)",
    "cluster.md: [B:7913] PAUSE pbq state",
    "cluster.md: C (no jobs in pbq)",
    "cluster.md: [B:7913] ADDJOB pbq z 0",
    "cluster.md: [B:7913] QSTAT fedq",
}


# ======================================================================
# Scenario: what the transcripts describe in words.
# ======================================================================

def _add_jobs(queues):
    """One ADDJOB per queue name; returns our new job IDs."""
    return lambda r: [r.setup_call(b"ADDJOB", q, b"x", b"0") for q in queues]


def _poll(what, predicate, interval=0.1, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs polling until %s" % (timeout, what))
        time.sleep(interval)


def _cluster_info_fields(r, name):
    text = r.conn(name + " helper").call(b"CLUSTER", b"INFO")[1]
    return dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)


def _poll_meshed(r):
    """Every node knows 3 nodes and reaches the 2 others (helper
    connections, every 0.1 s)."""
    def meshed():
        infos = [_cluster_info_fields(r, n) for n in ORIGINAL_CLUSTER]
        return all(i[b"cluster_known_nodes"] == b"3" and i[b"cluster_reachable_nodes"] == b"2" for i in infos)
    _poll("cluster_known_nodes:3 and cluster_reachable_nodes:2 on A, B and C", meshed)


def _poll_hello_priority_100(r):
    def leaving_seen():
        hello = r.conn("A helper").call(b"HELLO")
        return any(e[0] == "*" and e[1][3] == ("$", b"100") for e in hello[1][2:])
    _poll("an entry of HELLO on A shows priority 100", leaving_seen)


def _drain_cq_on_a(r):
    """GETJOB NOHANG COUNT 1000 FROM cq on A: the later JSCAN on A shows
    every cq job active, never nacked nor delivered twice, i.e. fetched
    once, not acked."""
    value = r.conn("A").call(b"GETJOB", b"NOHANG", b"COUNT", b"1000", b"FROM", b"cq")
    assert value[0] == "*" and value[1], value


# Prose lines between blocks ("(...)" paragraphs): line text -> action.
# An action returning IDs registers them as anonymous jobs (the original's
# IDs for them are unknown; SCAN comparisons match them one to one).
PROSE_ACTIONS = {
    "30 more queues manyq00..manyq29 created with one job each, not shown":
        _add_jobs([b"manyq%02d" % i for i in range(30)]),
    "20 more jobs added to queue jsmany, not shown":
        _add_jobs([b"jsmany"] * 20),
    "polled CLUSTER INFO on all three until cluster_known_nodes:3 and cluster_reachable_nodes:2; reached: True":
        _poll_meshed,
    "queue cq drained on A beforehand, not shown":
        _drain_cq_on_a,
    "polled HELLO on A every 0.1s until an entry showed priority 100: 20 polls":
        _poll_hello_priority_100,
}


def _c_sleeps(r):
    """Send C the DEBUG SLEEP 2 whose reply a later block titled "reply to
    DEBUG SLEEP 2 sent to C" shows (read there), and give C 0.1 s to fall
    asleep.  C's connection must not be used in between."""
    later = next(b for b in r.blocks[r.current.index + 1:] if b.title == "reply to DEBUG SLEEP 2 sent to C")
    r.send_early(later, "C")
    time.sleep(0.1)


_NOW = ("the same moment as the block before (its delay already elapsed)", lambda r: None)

# Before a block: (file, title), (file, "[tag] command") or (file, command),
# tried in that order -> (description, action(replayer)).
BEFORE = {
    ("jobs.md", "more than half of TTL 2 elapsed"):
        ("the job was added with TTL 2: wait until more than 1 s elapsed",
         lambda r: time.sleep(1.1)),
    # cluster.md, 3-node sections.
    ("cluster.md", "[A:7912] > ADDJOB cq will-timeout 300 REPLICATE 3"):
        ("first block of \"Replication timeout (C blocked by DEBUG SLEEP 2)\": C sleeps", _c_sleeps),
    ("cluster.md", "ASYNC job 0.3s later"): ("wait 0.3 s", lambda r: time.sleep(0.3)),
    ("cluster.md", "on A 0.5s later"): ("wait 0.5 s", lambda r: time.sleep(0.5)),
    ("cluster.md", "on B 0.5s later"): _NOW,
    # "ACKJOB while C is blocked by DEBUG SLEEP 2": the ADDJOB before it
    # replicated to C (REPLICATE 3, no delay), so C falls asleep after it.
    ("cluster.md", "[A:7912] > ACKJOB D-a79cedd4-Pn8np8uiIuR/P1p5OcD8vOdE-05a1"):
        ("C sleeps (DEBUG SLEEP 2) from right before the ACKJOB", _c_sleeps),
    ("cluster.md", "on A, 0.2s after ACKJOB"): ("wait 0.2 s", lambda r: time.sleep(0.2)),
    ("cluster.md", "on B, 0.2s after ACKJOB on A"): _NOW,
    ("cluster.md", "on A, 1s after C woke up"):
        ("wait 1 s (the block before read C's DEBUG SLEEP reply)", lambda r: time.sleep(1.0)),
    ("cluster.md", "on B, 1s after C woke up"): _NOW,
    ("cluster.md", "on C, 1s after it woke up"): _NOW,
    ("cluster.md", "1s after MEET of the forgotten node"): ("wait 1 s", lambda r: time.sleep(1.0)),
}

TIMED_TITLE = re.compile(r"\b\d+(\.\d+)?s\b")


def before_key_lookup(table, block):
    for key in (block.title, "[%s] > %s" % (block.tag, block.command) if block.tag else None, block.command):
        if key is not None and (block.file, key) in table:
            return table[(block.file, key)]
    return None


def before_action(block):
    return before_key_lookup(BEFORE, block)


# The job C adds while leaving (REPLICATE 2: copies on A and B, none on C);
# C tells one copy, picked at random, to queue it.  The original picked A.
LEAVING_JOB = b"D-af0e5b0c-K4nsrMYnJ54o6BjRkcyd3ZYp-05a1"


def _leaving_job_queued_on_b(r):
    """Did our C pick B?  Asked once (after the reply of the first block
    that depends on it was read), with SHOW on helper connections to A and
    B every 10 ms until one of them has the job queued (SHOW changes
    nothing)."""
    if r.leaving_job_on_b is None:
        our = r.idmap[LEAVING_JOB]

        def state(name):
            record = r.conn(name + " helper").call(b"SHOW", our)
            return record[0] == "*" and record[1] is not None and dict(_fields(record)).get(b"state")

        def queued_somewhere():
            r.leaving_job_on_b = state("B") == ("$", b"queued")
            return r.leaving_job_on_b or state("A") == ("$", b"queued")
        _poll("the job C added while leaving is queued on A or B", queued_somewhere, interval=0.01, timeout=2)
    return r.leaving_job_on_b


def _without_lvq_queue(r, values):
    if not _leaving_job_queued_on_b(r):
        return values
    out = []
    for kind, v in values:
        if kind == "$":  # INFO queues
            v = v.replace(b"registered_queues:6\r\n", b"registered_queues:5\r\n")
        elif kind == "*":  # QSCAN: [cursor, [names]]
            v = [v[0], ("*", [x for x in v[1][1] if x != ("$", b"lvq")])]
        out.append((kind, v))
    return out


def _leaving_job_active_on_a(r, values):
    if not _leaving_job_queued_on_b(r):
        return values
    our = r.idmap[LEAVING_JOB]
    (kind, (cursor, (_, records))), = values
    records = [_set_field(x, b"state", ("$", b"active")) if dict(_fields(x)).get(b"id") == ("$", our) else x
               for x in records]
    return [(kind, [cursor, ("*", records)])]


# Expectations that depend on a random choice of our server: (file, key as
# for BEFORE) -> (description, adjust(replayer, values) -> values).
EXPECTED_ADJUST = {
    ("cluster.md", "[A:7912] > INFO queues"):
        ("if our C had B queue its job, A has no queue lvq: one queue less", _without_lvq_queue),
    ("cluster.md", "[A:7912] > QSCAN 0 COUNT 100"):
        ("if our C had B queue its job, A has no queue lvq", _without_lvq_queue),
    ("cluster.md", "[A:7912] > JSCAN 0 COUNT 100 REPLY all"):
        ("if our C had B queue its job, A's copy is active, not queued", _leaving_job_active_on_a),
}

# Blocked commands woken by another client: (file, title) ->
# (delay in s, commands the other client sends, in one write).
WAKE = {
    ("getjob.md", "blocked, ADDJOB from another client after ~0.3s"):
        (0.3, [[b"ADDJOB", b"gblock", b"wakeup", b"0"]]),
    # The reply holds one job of gblock2: the first ADDJOB wakes the client,
    # the second one (pipelined right after it) must not be added to it.
    ("getjob.md", "blocked with COUNT 5 WITHCOUNTERS, two ADDJOBs from another client"):
        (0.3, [[b"ADDJOB", b"gblock2", b"x1", b"0"], [b"ADDJOB", b"gblock0", b"x2", b"0"]]),
}


def _admin_prelude(r):
    """admin.md was captured right after scan-pause.md on the same node (its
    INFO shows registered_jobs:24, registered_queues:4): rebuild that
    population, js1 (2 jobs), js2 (2), jsmany (20) and the queue pz that
    PAUSE created."""
    for argv in ([b"js1", b"a"], [b"js1", b"b"], [b"js2", b"c"], [b"js2", b"delayed"]):
        r.setup_call(b"ADDJOB", argv[0], argv[1], b"0")
    for _ in range(20):
        r.setup_call(b"ADDJOB", b"jsmany", b"x", b"0")
    r.setup_call(b"PAUSE", b"pz", b"in")
    r.setup_call(b"PAUSE", b"pz", b"none")


PRELUDE = {"admin.md": _admin_prelude}

# Client addresses the original printed (admin.md): the main connection
# (CLIENT LIST, MONITOR lines) and the victim of CLIENT KILL.
ORIGINAL_MAIN_ADDR = b"127.0.0.1:42874"
ORIGINAL_VICTIM_ADDR = b"127.0.0.1:42894"


def _timing_floor(block, argv, wake):
    """Lower bound (s) for "arrived after Xs": what made the original wait."""
    if block.arrived_after is None:
        return 0.0
    if wake is not None:
        return wake[0] * 0.9
    name = argv[0].upper() if argv else b""
    if name == b"GETJOB":
        upper = [a.upper() for a in argv]
        if b"TIMEOUT" in upper:
            return int(argv[upper.index(b"TIMEOUT") + 1]) / 1000.0 * 0.9
    if name == b"DEBUG" and len(argv) == 3 and argv[1].upper() == b"SLEEP":
        return float(argv[2]) * 0.9
    if name == b"ADDJOB" and len(argv) > 3 and argv[3].isdigit() and block.reply.startswith(b"-NOREPL Timeout"):
        return int(argv[3]) / 1000.0 * 0.9  # the replication timeout (ms)
    # CLIENT PAUSE abc after CLIENT PAUSE 10: the original's 0.07 s is its
    # 100 ms cron granularity; the pause itself is only 10 ms.
    return 0.0


# ======================================================================
# Connections
# ======================================================================

class Conn:
    """A raw socket keeping every byte; replies are framed with golden.parse_reply."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
        self.buf = b""
        self.eof = False
        host, lport = self.sock.getsockname()[:2]
        self.addr = b"%s:%d" % (host.encode(), lport)

    def send(self, data):
        if data:
            try:
                self.sock.sendall(data)
            except OSError:  # closed by the server: reading will say so
                self.eof = True

    def _recv(self, timeout):
        if self.eof:
            return False
        r, _, _ = select.select([self.sock], [], [], max(timeout, 0))
        if not r:
            return False
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_replies(self, n, timeout=READ_TIMEOUT):
        """(raw, values, problem): problem is None, 'timeout', 'closed' or
        'malformed'."""
        deadline = time.monotonic() + timeout
        raw = b""
        values = []
        while len(values) < n:
            try:
                value, end = parse_reply(self.buf, 0)
                values.append(value)
                raw += self.buf[:end]
                self.buf = self.buf[end:]
                continue
            except golden.Incomplete:
                pass
            except ValueError:
                return raw + self.buf, values, "malformed"
            if not self._recv(deadline - time.monotonic()):
                return raw + self.buf, values, "closed" if self.eof else "timeout"
        return raw, values, None

    def silence(self, seconds, keep=False):
        """Bytes that arrive within ``seconds`` (b"" expected); ``keep``
        leaves them to be read as replies."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._recv(deadline - time.monotonic()):
            pass
        extra = self.buf
        if not keep:
            self.buf = b""
        return extra

    def wait_closed(self, timeout=3.0):
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self._recv(deadline - time.monotonic())
        return self.eof

    def call(self, *argv):
        self.send(encode_command(list(argv)))
        raw, values, problem = self.read_replies(1)
        assert problem is None, (argv, raw, problem)
        return values[0]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ======================================================================
# Normalizers: (expected value, our value, replayer) -> list of problems
# ======================================================================

def _typed(v):
    return v[0]


def _int_in(v, lo, hi, what):
    if v[0] != ":":
        return ["%s: expected an integer, got %r" % (what, v)]
    if not lo <= v[1] <= hi:
        return ["%s: %d not in [%d, %d]" % (what, v[1], lo, hi)]
    return []


def _nearest(value, candidates):
    return min(candidates, key=lambda c: abs(c - value))


def _fields(v):
    items = v[1]
    return [(items[i][1], items[i + 1]) for i in range(0, len(items) - 1, 2)]


def _node_set_problems(key, ev, ov, rec, orec, r):
    """nodes-delivered / nodes-confirmed: sets (hash table order).  Where
    the replication level left the original a choice, another equally
    sized choice of ours is fine (see the module docstring)."""
    what = key.decode()
    if ev[0] != "*" or ov[0] != "*" or ov[1] is None or any(x[0] != "$" for x in ov[1]):
        return ["%s: expected %r, got %r" % (what, ev, ov)]
    e, o = [x[1] for x in ev[1]], [x[1] for x in ov[1]]
    if len(set(o)) != len(o):
        return ["%s: duplicates in %r" % (what, o)]
    if set(e) == set(o):
        return []
    if key != b"nodes-delivered" or r.current_node not in ORIGINAL_CLUSTER:
        return ["%s: expected %r, got %r" % (what, e, o)]
    cluster = {r.our_node_id(n) for n in ORIGINAL_CLUSTER}
    answering = r.our_node_id(r.current_node)
    creator = [n for n in cluster if n[:8] == orec[b"id"][1][2:10]]
    pinned = [answering] + creator
    ok = (len(e) == len(o) < len(cluster) and set(o) <= cluster
          and all((p in e) == (p in o) for p in pinned))
    return [] if ok else ["%s: expected %r (or another choice of replicas), got %r" % (what, e, o)]


def _ttl_from_id(job_id):
    """The TTL (s) a job ID encodes: minutes in its last 4 hex digits, the
    lowest bit being the at-least-once flag."""
    try:
        return (int(job_id[36:40], 16) & ~1) * 60
    except ValueError:
        return None


def check_job_record(exp, ours, r):
    """SHOW / JSCAN REPLY all: a 30 element field/value array."""
    if exp[0] != "*" or exp[1] is None:
        return ["expected %r, got %r" % (exp, ours)]
    if ours[0] != "*" or ours[1] is None or len(ours[1]) != len(exp[1]):
        return ["not a %d element array: %r" % (len(exp[1]), ours)]
    ef, of = _fields(exp), _fields(ours)
    if [k for k, _ in ef] != [k for k, _ in of]:
        return ["field names differ: %r vs %r" % ([k for k, _ in ef], [k for k, _ in of])]
    rec = {k: v for k, v in ef}
    orec = {k: v for k, v in of}
    retry = rec[b"retry"][1] * 1000
    delay = rec[b"delay"][1] * 1000
    now_ms = int(time.time() * 1000)
    # How long ago our job was created (its ctime is ms * 1e6 + a counter).
    age_ms = now_ms - orec[b"ctime"][1] // 1_000_000 if orec[b"ctime"][0] == ":" and orec[b"ctime"][1] else 0
    problems = []
    for (key, ev), (_, ov) in zip(ef, of):
        what = key.decode()
        if key == b"ttl":
            initial = _ttl_from_id(rec[b"id"][1] or b"")
            if initial and ev[1] < initial - 3 and not ev[1] - 3 <= ov[1] <= ev[1] + 3:
                # Shown a while after its creation: ours counts down from
                # the TTL its ID encodes, by our job's age.
                mine = initial - age_ms // 1000
                problems += _int_in(ov, mine - 3, mine + 3, what + " (counting down from %d)" % initial)
            else:
                problems += _int_in(ov, ev[1] - 3, ev[1] + 3, what)
        elif key == b"ctime":
            # ms * 1e6 + per-ms counter, of a job created during this test.
            problems += _int_in(ov, (now_ms - 300_000) * 1_000_000, (now_ms + 1000) * 1_000_000, what)
        elif key in (b"nodes-delivered", b"nodes-confirmed"):
            problems += _node_set_problems(key, ev, ov, rec, orec, r)
        elif key in (b"next-requeue-within", b"next-awake-within"):
            if _typed(ev) != _typed(ov) or (ev[0] == "$" and ev != ov):
                problems.append("%s: expected %r, got %r" % (what, ev, ov))
                continue
            if ev[0] != ":":
                continue
            if key == b"next-awake-within" and rec[b"state"] == ("$", b"acked"):
                # The next GC attempt of an acked job: soon.
                lo, hi = olo, ohi = 0, ACKED_GC_WITHIN_MS
            elif key == b"next-requeue-within":
                # qtime = now + retry (or delay) + a random 0..500 ms spread.
                base = _nearest(ev[1], [c for c in (retry, delay) if c] or [0])
                lo, hi = olo, ohi = base - 1000, base + 500
            else:
                # awake = requeue - 500 (WILLQUEUE), the delay, or the TTL
                # (each side's own TTL: ours may be younger or older).
                cands = [(c, o) for c, o in ((retry - 500,) * 2, (retry,) * 2, (delay,) * 2,
                                             (rec[b"ttl"][1] * 1000, orec[b"ttl"][1] * 1000)) if c > 0]
                base, obase = min(cands, key=lambda c: abs(c[0] - ev[1])) if cands else (0, 0)
                lo, hi = base - 1000, base + 1000
                olo, ohi = obase - 1000, obase + 1000
            if lo - SHOWN_LATER_MS <= ev[1] < lo:
                # The original showed the job a while after creating (or
                # delivering) it: ours counts down since its creation at most.
                olo -= age_ms
            elif not lo <= ev[1] <= hi:
                problems.append("%s: the original's %d is outside [%d, %d]: unknown scenario" % (
                    what, ev[1], lo, hi))
            problems += _int_in(ov, olo, ohi, what)
        elif ev != ov:
            problems.append("%s: expected %r, got %r" % (what, ev, ov))
    return problems


# A job the original showed again later (cluster.md's final JSCAN, ~10 s
# after the ADDJOBs): its timers counted down by up to this much.
SHOWN_LATER_MS = 60_000
# An acked job's next GC attempt (next-awake-within) is at most this far.
ACKED_GC_WITHIN_MS = 5_000


def check_time(exp, ours, r):
    if ours[0] != "*" or ours[1] is None or len(ours[1]) != 2 or any(x[0] != "$" for x in ours[1]):
        return ["TIME: not an array of two bulks: %r" % (ours,)]
    sec, usec = ours[1][0][1], ours[1][1][1]
    if not (sec.isdigit() and usec.isdigit()):
        return ["TIME: not digits: %r" % (ours,)]
    problems = []
    if abs(int(sec) - time.time()) > 5:
        problems.append("TIME: %s s is not now" % sec.decode())
    if not 0 <= int(usec) < 1_000_000 or (len(usec) > 1 and usec[0:1] == b"0"):
        problems.append("TIME: bad microseconds %r" % usec)
    return problems


def check_qstat(exp, ours, r):
    if ours[0] != "*" or ours[1] is None or len(ours[1]) != len(exp[1]):
        return ["QSTAT: not a %d element array: %r" % (len(exp[1]), ours)]
    problems = []
    for (key, ev), (okey, ov) in zip(_fields(exp), _fields(ours)):
        if key != okey:
            problems.append("QSTAT field %r where %r expected" % (okey, key))
        elif key in (b"age", b"idle"):  # seconds since creation / last use
            problems += _int_in(ov, 0, ev[1] + 3, key.decode())
        elif ev != ov:
            problems.append("%s: expected %r, got %r" % (key.decode(), ev, ov))
    return problems


_FLOAT2 = re.compile(rb"\A-?\d+\.\d\d\Z")
_UINT = re.compile(rb"\A\d+\Z")
_HUMAN = re.compile(rb"\A\d+(\.\d\d)?[BKMG]\Z")
_CMDSTAT = re.compile(rb"\Acalls=(\d+),usec=(\d+),usec_per_call=(\d+\.\d\d)\Z")


def _re_rule(rx):
    return lambda exp, ours, r: [] if rx.match(ours) else ["%r does not match %s" % (ours, rx.pattern)]


def _known_rule(name, rx):
    def rule(exp, ours, r):
        r.note_known("INFO field " + name)
        return [] if rx.match(ours) else ["%r does not match %s" % (ours, rx.pattern)]
    return rule


def _exact_of(value_fn):
    return lambda exp, ours, r: [] if ours == value_fn(r) else ["expected %r" % value_fn(r)]


INFO_RULES = {
    # Server: build and process facts.
    "disque_build_id": _re_rule(re.compile(rb"\A[0-9a-f]{16}\Z")),
    "os": _re_rule(re.compile(rb"\A\S+ \S+ \S+\Z")),
    "gcc_version": _known_rule("gcc_version", re.compile(rb"\A\d+\.\d+\.\d+\Z")),
    "process_id": _re_rule(_UINT),
    "run_id": _re_rule(re.compile(rb"\A[0-9a-f]{40}\Z")),
    "tcp_port": _exact_of(lambda r: b"%d" % r.port),
    "uptime_in_seconds": _re_rule(re.compile(rb"\A\d{1,3}\Z")),
    "executable": _re_rule(re.compile(rb"\A/\S+\Z")),
    # Memory.
    "used_memory": _re_rule(_UINT),
    "used_memory_human": _re_rule(_HUMAN),
    "used_memory_rss": _re_rule(_UINT),
    "used_memory_peak": _re_rule(_UINT),
    "used_memory_peak_human": _re_rule(_HUMAN),
    "mem_fragmentation_ratio": _re_rule(_FLOAT2),
    "mem_allocator": _known_rule("mem_allocator", re.compile(rb"\A\S+\Z")),
    # Stats counters.
    "total_connections_received": _re_rule(_UINT),
    "total_commands_processed": _re_rule(_UINT),
    "instantaneous_ops_per_sec": _re_rule(_UINT),
    "total_net_input_bytes": _re_rule(_UINT),
    "total_net_output_bytes": _re_rule(_UINT),
    "instantaneous_input_kbps": _re_rule(_FLOAT2),
    "instantaneous_output_kbps": _re_rule(_FLOAT2),
    # CPU.
    "used_cpu_sys": _re_rule(_FLOAT2),
    "used_cpu_user": _re_rule(_FLOAT2),
    "used_cpu_sys_children": _re_rule(_FLOAT2),
    "used_cpu_user_children": _re_rule(_FLOAT2),
}


def _info_sections(text):
    """[(title, [(key, value)])]; raises ValueError on a malformed text."""
    if not text:
        return []
    if not text.endswith(b"\r\n"):
        raise ValueError("INFO text does not end with CRLF")
    sections = []
    for chunk in text[:-2].split(b"\r\n\r\n"):
        lines = chunk.split(b"\r\n")
        if not lines[0].startswith(b"# "):
            raise ValueError("section without a '# title': %r" % lines[0])
        fields = []
        for line in lines[1:]:
            key, sep, value = line.partition(b":")
            if not sep:
                raise ValueError("line without ':': %r" % line)
            fields.append((key.decode(), value))
        sections.append((lines[0][2:].decode(), fields))
    return sections


# INFO fields we show and the original does not (a KNOWN_DIFFERENCES key each).
EXTRA_INFO_FIELDS = {"runtime": "INFO field runtime"}


def check_info(exp, ours, r):
    if ours[0] != "$" or ours[1] is None:
        return ["INFO: not a bulk: %r" % (ours,)]
    try:
        es, os_ = _info_sections(exp[1]), _info_sections(ours[1])
    except ValueError as e:
        return ["INFO: %s" % e]
    if [t for t, _ in es] != [t for t, _ in os_]:
        return ["INFO sections %r, expected %r" % ([t for t, _ in os_], [t for t, _ in es])]
    problems = []
    for (title, ef), (_, of) in zip(es, os_):
        if title == "Commandstats":
            problems += _check_commandstats(of, r)
            continue
        extra = [k for k, _ in of if k in EXTRA_INFO_FIELDS and k not in dict(ef)]
        if extra:
            for k in extra:
                r.note_known(EXTRA_INFO_FIELDS[k])
            of = [(k, v) for k, v in of if k not in extra]
        if [k for k, _ in ef] != [k for k, _ in of]:
            problems.append("INFO %s fields %r, expected %r" % (title, [k for k, _ in of], [k for k, _ in ef]))
            continue
        for (key, ev), (_, ov) in zip(ef, of):
            rule = INFO_RULES.get(key)
            if rule is None:
                if ev != ov:
                    problems.append("INFO %s: expected %r, got %r" % (key, ev, ov))
            else:
                problems += ["INFO %s: %s" % (key, p) for p in rule(ev, ov, r)]
    return problems


def _command_order():
    """Command names in the original's table order (its COMMAND reply)."""
    for b in golden.parse_file("admin.md"):
        if b.command == "COMMAND":
            value, _ = parse_reply(b.reply)
            return [entry[1][0][1] for entry in value[1]]
    raise AssertionError("admin.md has no COMMAND block")


def _check_commandstats(fields, r):
    """Counters vary (and depend on what ran before); check the format, that
    usec_per_call = usec / calls, and the original's ordering of names."""
    order = r.command_order
    problems = []
    positions = []
    for key, value in fields:
        name = key[len("cmdstat_"):].encode() if key.startswith("cmdstat_") else None
        m = _CMDSTAT.match(value)
        if name not in order or not m:
            problems.append("commandstats: bad line %s:%r" % (key, value))
            continue
        calls, usec, per = int(m.group(1)), int(m.group(2)), m.group(3)
        if calls < 1 or per != b"%.2f" % (usec / calls):
            problems.append("commandstats: inconsistent %s:%r" % (key, value))
        positions.append(order.index(name))
    if positions != sorted(positions):
        problems.append("commandstats: not in the original's command order")
    if not fields:
        problems.append("commandstats: empty")
    return problems


_CLIENT_FIELDS = re.compile(rb"(\S+?)=(\S*)")


def check_client_list(exp, ours, r):
    if ours[0] != "$" or ours[1] is None:
        return ["CLIENT LIST: not a bulk: %r" % (ours,)]
    el, ol = exp[1].split(b"\n"), ours[1].split(b"\n")
    if len(el) != len(ol):
        return ["CLIENT LIST: %d lines, expected %d" % (len(ol) - 1, len(el) - 1)]
    problems = []
    for eline, oline in zip(el, ol):
        ef, of = _CLIENT_FIELDS.findall(eline), _CLIENT_FIELDS.findall(oline)
        if [k for k, _ in ef] != [k for k, _ in of] or b" ".join(k + b"=" + v for k, v in of) != oline:
            problems.append("CLIENT LIST: fields %r, expected %r" % (oline, eline))
            continue
        for (key, ev), (_, ov) in zip(ef, of):
            if key in (b"id", b"fd", b"age", b"idle"):
                if not _UINT.match(ov) or (key in (b"age", b"idle") and int(ov) > 60):
                    problems.append("CLIENT LIST %s=%r" % (key.decode(), ov))
            elif ev != ov:
                problems.append("CLIENT LIST %s: expected %r, got %r" % (key.decode(), ev, ov))
    return problems


# Commands slower than the threshold are logged.  Durations vary with the
# machine's load (e.g. CONFIG REWRITE fsyncs the file): an entry in our log
# that the original does not have must be genuinely slow, at least this.
SLOW_ENOUGH_USEC = 10_000


def _slowlog_entry_problems(o):
    if o[0] != "*" or o[1] is None or len(o[1]) != 4 or o[1][3][0] != "*":
        return ["SLOWLOG entry shape %r" % (o,)]
    return (_int_in(o[1][0], 0, 1 << 62, "SLOWLOG id")
            + _int_in(o[1][1], int(time.time()) - 60, int(time.time()) + 5, "SLOWLOG time")
            + _int_in(o[1][2], 0, 1_000_000, "SLOWLOG usec"))


def check_slowlog(exp, ours, r):
    """SLOWLOG GET: [id, unix time, usec, argv]; time and duration vary.
    The original's entries must be ours, in order, with the same arguments
    and ids shifted by a constant (ids are never reused: extra entries of
    ours, see SLOW_ENOUGH_USEC, shift them)."""
    if ours[0] != "*" or ours[1] is None:
        return ["SLOWLOG: not an array: %r" % (ours,)]
    problems = []
    for o in ours[1]:
        problems += _slowlog_entry_problems(o)
    if problems:
        return problems
    pending = list(exp[1])
    offsets = set()
    for o in ours[1]:
        if pending and o[1][3] == pending[0][1][3]:
            offsets.add(o[1][0][1] - pending.pop(0)[1][0][1])
        elif o[1][2][1] < SLOW_ENOUGH_USEC:
            problems.append("SLOWLOG: entry %r is neither the original's nor slow" % (o,))
    if pending:
        problems.append("SLOWLOG: missing %r" % (pending,))
    if len(offsets) > 1 or any(x < 0 for x in offsets):
        problems.append("SLOWLOG: ids do not follow the original's: %r" % (ours,))
    return problems


def check_slowlog_len(exp, ours, r):
    """SLOWLOG LEN: the original's count plus our genuinely slow extras."""
    if ours[0] != ":" or ours[1] < exp[1]:
        return ["SLOWLOG LEN %r, expected %r" % (ours, exp)]
    entries = r.conn("helper").call(b"SLOWLOG", b"GET", b"%d" % ours[1])
    slow = [e for e in entries[1] if e[1][2][1] >= SLOW_ENOUGH_USEC]
    if ours[1] - exp[1] > len(slow):
        return ["SLOWLOG LEN %d: only %d slow entries explain the %d extra ones" % (
            ours[1], len(slow), ours[1] - exp[1])]
    return []


_MONITOR = re.compile(rb"\A(\d+)\.(\d{6}) \[(\S+)\] (.*)\Z", re.S)


def check_monitor_line(exp, ours, r):
    if ours[0] != "+":
        return ["MONITOR: not a status line: %r" % (ours,)]
    em, om = _MONITOR.match(exp[1]), _MONITOR.match(ours[1])
    if not om:
        return ["MONITOR: bad line %r" % ours[1]]
    problems = []
    if abs(int(om.group(1)) - time.time()) > 5:
        problems.append("MONITOR: timestamp is not now")
    if (om.group(3), om.group(4)) != (em.group(3), em.group(4)):
        problems.append("MONITOR: expected [%s] %s" % (em.group(3).decode(), em.group(4).decode()))
    return problems


def check_cluster_nodes(exp, ours, r):
    """CLUSTER NODES: "<id> <ip:port> <flags> <ping_sent> <pong_received>
    <link>" lines, compared as a set; see the module docstring."""
    if ours[0] != "$" or ours[1] is None:
        return ["CLUSTER NODES: not a bulk: %r" % (ours,)]
    now_ms = time.time() * 1000
    problems = []

    def key(line, mine):
        f = line.split(b" ")
        if len(f) != 6:
            return line
        node_id, addr, flags, ping_sent, pong, link = f
        if b"handshake" in flags.split(b",") and NODE_ID.match(node_id):
            node_id = b"<temporary id>"
        if pong != b"0" and pong.isdigit():
            if mine and not now_ms - 120_000 <= int(pong) <= now_ms + 1000:
                problems.append("CLUSTER NODES: pong_received %s is not recent" % pong.decode())
            pong = b"<recent>"
        return b" ".join((node_id, addr, flags, ping_sent, pong, link))

    if not ours[1].endswith(b"\n") and ours[1]:
        return ["CLUSTER NODES: text does not end with a newline: %r" % ours[1]]
    el = sorted(key(x, False) for x in exp[1].split(b"\n")[:-1])
    ol = sorted(key(x, True) for x in ours[1].split(b"\n")[:-1])
    if el != ol:
        problems.append("CLUSTER NODES: lines %r, expected %r" % (ol, el))
    return problems


_STATS_COUNTER = re.compile(rb"\Acluster_stats_messages_\w+\Z")


def check_cluster_info(exp, ours, r):
    """CLUSTER INFO: message counters vary (positive where the original's
    are), the rest exact."""
    if ours[0] != "$" or ours[1] is None:
        return ["CLUSTER INFO: not a bulk: %r" % (ours,)]
    el, ol = exp[1].split(b"\r\n"), ours[1].split(b"\r\n")
    if len(el) != len(ol):
        return ["CLUSTER INFO: %r, expected %r" % (ours[1], exp[1])]
    problems = []
    for e, o in zip(el, ol):
        ek, _, ev = e.partition(b":")
        ok, _, ov = o.partition(b":")
        if ek == ok and _STATS_COUNTER.match(ek) and _UINT.match(ov):
            if ev != b"0" and ov == b"0":
                problems.append("CLUSTER INFO: %r, expected %r" % (o, e))
        elif e != o:
            problems.append("CLUSTER INFO: %r, expected %r" % (o, e))
    return problems


def check_hello(exp, ours, r):
    """HELLO: version and our ID exact, the node entries as a set."""
    if ours[0] != "*" or ours[1] is None or len(ours[1]) != len(exp[1]):
        return ["HELLO: expected %d elements, got %r" % (len(exp[1]), ours)]
    if ours[1][:2] != exp[1][:2] or sorted(encode(x) for x in ours[1][2:]) != sorted(encode(x) for x in exp[1][2:]):
        return ["HELLO: expected %r (entries in any order)" % (exp,)]
    return []


def pick_normalizer(argv, block):
    if block.command.startswith("(read pending output on monitor conn)"):
        return check_monitor_line
    if not argv:
        return None
    name = argv[0].upper()
    sub = argv[1].upper() if len(argv) > 1 else b""
    return {
        b"SHOW": check_job_record,
        b"TIME": check_time,
        b"INFO": check_info,
        b"QSTAT": check_qstat,
        b"HELLO": check_hello,
    }.get(name) or {
        (b"CLUSTER", b"NODES"): check_cluster_nodes,
        (b"CLUSTER", b"INFO"): check_cluster_info,
        (b"CLIENT", b"LIST"): check_client_list,
        (b"SLOWLOG", b"GET"): check_slowlog,
        (b"SLOWLOG", b"LEN"): check_slowlog_len,
    }.get((name, sub))


# Checks of the known differences that allow one (same signature).

def known_structsize(exp, ours, r):
    ok = ours[0] == "$" and ours[1] and re.match(rb"\Abits:64 job:\d+", ours[1])
    return [] if ok else ["unexpected reply %r" % (ours,)]


def _set_field(record, key, value):
    """A copy of a SHOW record value with one field replaced."""
    items = list(record[1])
    for i in range(0, len(items) - 1, 2):
        if items[i][1] == key:
            items[i + 1] = value
            return ("*", items)
    raise KeyError(key)


def _field(record, key):
    return dict(_fields(record)).get(key)


def _ids(*names):
    return ("*", [("$", n) for n in names])


def _is_record(v):
    return v[0] == "*" and v[1] is not None and len(v[1]) == 30


def _gc_in_progress(exp, ours, r):
    """$-1 as the original, or the job still there: acked (or not yet, on
    a node the ACK did not reach), confirmed by a subset of its nodes."""
    if ours == exp:
        return []
    if not _is_record(ours):
        return ["neither $-1 nor a job record: %r" % (ours,)]
    job_id = split_requests(r.map_sent(r.current))[0][1]
    delivered = {x[1] for x in _field(ours, b"nodes-delivered")[1]}
    confirmed = {x[1] for x in _field(ours, b"nodes-confirmed")[1]}
    me = r.our_node_id(r.current_node)
    # A dummy ACK (no known copies) counts every node that answered.
    may_confirm = delivered | {me} if delivered else {r.our_node_id(n) for n in ORIGINAL_CLUSTER}
    if _field(ours, b"id") != ("$", job_id) or not confirmed <= may_confirm:
        return ["not the job %r with GC in progress: %r" % (job_id, ours)]
    return []


def known_acked_in_progress(exp, ours, r):
    problems = _gc_in_progress(exp, ours, r)
    if not problems and ours != exp and _field(ours, b"state") != ("$", b"acked"):
        problems.append("expected the job acked, got %r" % (_field(ours, b"state"),))
    return problems


def known_not_yet_collected(exp, ours, r):
    return _gc_in_progress(exp, ours, r)


def known_dummy_ack(exp, ours, r):
    problems = known_acked_in_progress(exp, ours, r)
    if not problems and ours != exp and (_field(ours, b"queue") != ("$", None)
                                         or _field(ours, b"nodes-delivered") != ("*", [])):
        problems.append("not a dummy ACK: %r" % (ours,))
    return problems


def known_deljob_in_flight(exp, ours, r):
    problems = _gc_in_progress(exp, ours, r)
    if not problems and ours != exp and _field(ours, b"state") == ("$", b"acked"):
        problems.append("FASTACK acks nothing: %r" % (ours,))
    return problems


def known_import_rate_timing(exp, ours, r):
    if exp[0] != "*" or _field(exp, b"import-rate") != (":", 20):
        return ["the original's import-rate changed: %r" % (exp,)]
    rate = _field(ours, b"import-rate") if ours[0] == "*" else None
    if rate is None or rate[0] != ":" or not 1 <= rate[1] <= 20:
        return ["expected 1 <= import-rate <= 20, got %r" % (rate,)]
    return check_qstat(_set_field(exp, b"import-rate", rate), ours, r)


def known_federated_delivered(exp, ours, r):
    if r.current_node == "A" and ours == ("$", None):
        return []  # already collected (B's GOTACK and DELJOB went fast)
    exp = _set_field(exp, b"nodes-delivered", _ids(r.our_node_id("A"), r.our_node_id("B")))
    if _is_record(ours) and r.current_node == "A" and _field(ours, b"state") == ("$", b"acked"):
        # Acked: its next wake-up is a GC attempt (the original's timers
        # of an active job do not apply).
        exp = _set_field(exp, b"state", ("$", b"acked"))
        exp = _set_field(exp, b"next-awake-within", (":", ACKED_GC_WITHIN_MS // 2))
    return check_job_record(exp, ours, r)


def known_registered_jobs_minus_one(exp, ours, r):
    want = ("$", exp[1].replace(b"registered_jobs:9\r\n", b"registered_jobs:8\r\n"))
    return [] if ours == want and want != exp else ["expected %r" % (want,)]


def known_meet_in_progress(exp, ours, r):
    if ours[0] != "$" or ours[1] is None:
        return ["not a bulk: %r" % (ours,)]
    f = dict(line.split(b":", 1) for line in ours[1].split(b"\r\n") if b":" in line)
    try:
        reachable, size = int(f[b"cluster_reachable_nodes"]), int(f[b"cluster_size"])
    except (KeyError, ValueError):
        return ["bad CLUSTER INFO %r" % (ours,)]
    want = exp[1].replace(b"cluster_reachable_nodes:0\r\n", b"cluster_reachable_nodes:%d\r\n" % reachable)
    want = want.replace(b"cluster_size:1\r\n", b"cluster_size:%d\r\n" % size)
    problems = check_cluster_info(("$", want), ours, r)
    if size != reachable + 1 or size > 3:
        problems.append("cluster_size %d with %d reachable nodes" % (size, reachable))
    return problems


def known_addjob_before_pause(exp, ours, r):
    if ours == exp:
        return []
    if ours[0] != "+" or not JOB_ID_FULL.match(ours[1]):
        return ["expected %r or a job ID, got %r" % (exp, ours)]
    assert r.conn("B helper").call(b"FASTACK", ours[1]) == (":", 1)
    return []


def known_pause_in_flight(exp, ours, r):
    other = {("+", b"in"): ("+", b"none"), ("+", b"none"): ("+", b"in")}.get(exp)
    return [] if ours in (exp, other) else ["expected %r or %r" % (exp, other)]


KNOWN_CHECKS = {
    "admin.md: DEBUG STRUCTSIZE": known_structsize,
    "cluster.md: CLUSTER INFO (immediately after MEET)": known_meet_in_progress,
    "cluster.md: [B:7913] PAUSE pbq state": known_pause_in_flight,
    "cluster.md: C (no jobs in pbq)": known_pause_in_flight,
    "cluster.md: [B:7913] ADDJOB pbq z 0": known_addjob_before_pause,
    "cluster.md: right after ACKJOB on A": known_acked_in_progress,
    "cluster.md: on B right after ACKJOB on A": known_not_yet_collected,
    "cluster.md: SHOW after ACKJOB of unknown ID (cluster)": known_dummy_ack,
    "cluster.md: on B after FASTACK on A": known_deljob_in_flight,
    "cluster.md: [B:7913] QSTAT fedq": known_import_rate_timing,
    "cluster.md: [B:7913] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1": known_federated_delivered,
    "cluster.md: [A:7912] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1": known_federated_delivered,
    "cluster.md: [A:7912] INFO jobs": known_registered_jobs_minus_one,
}

# Known differences of a SCAN iteration: key -> the original's items the
# difference removes (function of the replayer; they must be missing).
FEDERATED_JOB = b"D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1"
KNOWN_SCAN_MISSING = {
    "cluster.md: [A:7912] JSCAN 0 COUNT 100 REPLY all": lambda r: {r.idmap.get(FEDERATED_JOB)},
}


assert set(KNOWN_CHECKS) | RACES | set(KNOWN_SCAN_MISSING) <= set(KNOWN_DIFFERENCES)


def known_key(block):
    """The KNOWN_DIFFERENCES key of a block, or None."""
    keys = []
    if block.title:
        keys.append("%s: %s (%s)" % (block.file, block.command, block.title))
        keys.append("%s: %s" % (block.file, block.title))
    if block.tag:
        keys.append("%s: [%s] %s" % (block.file, block.tag, block.command))
    keys.append("%s: %s" % (block.file, block.command))
    for k in keys:
        if k in KNOWN_DIFFERENCES:
            return k
    return None


# ======================================================================
# SCAN
# ======================================================================

SCAN_OPTIONS = {b"count": 1, b"minlen": 1, b"maxlen": 1, b"importrate": 1, b"queue": 1,
                b"state": 1, b"reply": 1, b"busyloop": 0}


def scan_cursor_index(argv):
    i = 1
    while i < len(argv):
        n = SCAN_OPTIONS.get(argv[i].lower())
        if n is not None and i + n < len(argv):
            i += 1 + n
            continue
        return i
    return None


def scan_parts(value):
    """(cursor, items) of a well-formed SCAN reply, else None."""
    if value[0] != "*" or value[1] is None or len(value[1]) != 2:
        return None
    cur, items = value[1]
    if cur[0] != "$" or cur[1] is None or not _UINT.match(cur[1]) or items[0] != "*" or items[1] is None:
        return None
    if int(cur[1]) >= 1 << 64:
        return None
    return cur[1], items[1]


def scan_key(item):
    """Name / ID of a SCAN item (REPLY all: the record's id field)."""
    if item[0] == "*":
        return item[1][1][1]
    return item[1]


# ======================================================================
# The replayer
# ======================================================================

class Result:
    def __init__(self, block, status, detail="", expected=b"", ours=b"", sent=b""):
        self.block, self.status, self.detail = block, status, detail
        self.expected, self.ours, self.sent = expected, ours, sent

    def describe(self):
        return ("%s\n    %s\n    sent:     %r\n    expected: %r\n    ours:     %r" % (
            self.block.label, self.detail, self.sent[:300], self.expected[:2000], self.ours[:2000]))


class Replayer:
    def __init__(self, file, workdir):
        self.file = file
        self.workdir = str(workdir)
        self.nodes = {}
        self.conns = {}
        self.idmap = {}  # original ID -> ours
        self.anon = set()  # our IDs of jobs the transcript created off-screen
        self.results = []
        self.known_used = set()
        self.command_order = _command_order()
        self.consumed = set()  # block indexes replayed as part of a SCAN group
        self.sticky = {}  # section -> connection name ("new connection" titles)
        self.node = self.start_node("main")
        self.port = self.node.port
        self.main_addr = None
        self.node_ids = {}  # original node ID -> ours
        self.ports = {}  # original cluster port -> ours (bytes)
        self.early = {}  # block index -> send time, for blocks sent ahead (DEBUG SLEEP)
        self.current = None  # the block being replayed
        self.current_node = "main"  # the node it runs on
        self.c_reset_id = None  # the original's new ID of C after CLUSTER RESET HARD
        self.leaving_job_on_b = None  # see EXPECTED_ADJUST

    # -- nodes and connections ------------------------------------------

    def start_node(self, name, wait=True):
        workdir = os.path.join(self.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        node = NodeProcess(workdir, port=self.free_port())
        config = os.path.join(workdir, "disque.conf")
        with open(config, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\nappendonly no\nmaxmemory 8gb\n" % (node.port, workdir))
        node.config = config
        node.start(wait=wait)
        self.nodes[name] = node
        return node

    def free_port(self):
        """A free port (and bus port) no node of ours has taken yet."""
        taken = {n.port for n in self.nodes.values()}
        while True:
            port = free_port()
            if port not in taken and port + 10000 not in taken:
                return port

    def start_trio(self):
        """The three nodes of the 3-node sections, fresh and not joined
        (the transcript MEETs them); their IDs and ports are learned."""
        trio = [self.start_node(name, wait=False) for name in ORIGINAL_CLUSTER]
        for node in trio:
            node.wait_ready()
        for name, (orig_port, orig_id) in ORIGINAL_CLUSTER.items():
            self.ports[orig_port] = b"%d" % self.nodes[name].port
            our_id = self.conn(name).call(b"CLUSTER", b"MYID")[1]
            assert NODE_ID.match(our_id), our_id
            self.node_ids[orig_id] = our_id

    def node_of(self, name):
        """The node a connection name belongs to ("A", "A helper", ...)."""
        if name.startswith("7915"):
            return self.nodes.get("7915") or self.start_node("7915")
        head = name.split()[0]
        if head in ORIGINAL_CLUSTER:
            if head not in self.nodes:
                self.start_trio()
            return self.nodes[head]
        return self.node

    def conn(self, name):
        c = self.conns.get(name)
        if c is None or c.eof:
            if c is not None:
                c.close()
            node = self.node_of(name)
            c = self.conns[name] = Conn(node.port)
        return c

    def our_node_id(self, name):
        """Our ID of the node ``name`` ("main", "A", "B", "C") now."""
        if name == "main":
            return self.my_id
        orig = ORIGINAL_CLUSTER[name][1]
        if name == "C" and self.c_reset_id is not None:
            orig = self.c_reset_id
        return self.node_ids[orig]

    def fresh_conn(self, name):
        old = self.conns.pop(name, None)
        if old is not None:
            old.close()
        return self.conn(name)

    def close(self):
        for c in self.conns.values():
            c.close()
        for n in self.nodes.values():
            n.stop()

    def setup_call(self, *argv, conn="main"):
        """A command the transcript implies but does not show; returns the
        reply's bytes (ADDJOB: our new job ID)."""
        value = self.conn(conn).call(*argv)
        assert value[0] in ("+", ":", "$"), (argv, value)
        return value[1]

    def note_known(self, key):
        assert key in KNOWN_DIFFERENCES, key
        self.known_used.add(key)

    # -- identities -----------------------------------------------------

    def map_ids(self, data: bytes) -> bytes:
        data = JOB_ID.sub(lambda m: self.idmap.get(m.group(0), m.group(0)), data)
        data = data.replace(ORIGINAL_NODE_ID, self.my_id)
        for orig, ours in self.node_ids.items():
            data = data.replace(orig, ours)
        return data

    def learn_node_ids(self, argv, exp, ours):
        """CLUSTER NODES: the "myself" line carries the answering node's ID;
        an original ID not seen before (C after CLUSTER RESET HARD) is
        mapped to ours."""
        if [a.upper() for a in argv[:2]] != [b"CLUSTER", b"NODES"] or exp[0] != "$" or ours[0] != "$":
            return

        def myself(text):
            for line in (text or b"").split(b"\n"):
                f = line.split(b" ")
                if len(f) > 2 and b"myself" in f[2].split(b","):
                    return f[0]
            return None

        e, o = myself(exp[1]), myself(ours[1])
        if e and o and NODE_ID.match(e) and e not in self.node_ids and e != ORIGINAL_NODE_ID \
                and o not in self.node_ids.values():
            self.node_ids[e] = o
            if self.current_node == "C":
                self.c_reset_id = e

    def learn_ids(self, exp, ours):
        """Walk the original's and our reply side by side; an original job
        ID not seen before, facing one of ours, is mapped to it."""
        if exp[0] != ours[0]:
            return
        if exp[0] == "*" and exp[1] is not None and ours[1] is not None:
            for e, o in zip(exp[1], ours[1]):
                self.learn_ids(e, o)
        elif exp[0] in ("+", "$") and exp[1] and ours[1]:
            if JOB_ID_FULL.match(exp[1]) and JOB_ID_FULL.match(ours[1]) and exp[1] not in self.idmap:
                if ours[1] not in self.idmap.values():
                    self.idmap[exp[1]] = ours[1]

    def substitute(self, value):
        """The original's reply, as our node should say it: IDs, port,
        directory and client addresses replaced."""
        kind, v = value
        if kind == "*":
            return value if v is None else ("*", [self.substitute(x) for x in v])
        if kind in ("+", "-", "$") and v is not None:
            v = self.map_ids(v)
            if v == ORIGINAL_PORT:
                v = b"%d" % self.port
            v = v.replace(ORIGINAL_DIR, self.node.workdir.encode())
            v = v.replace(b" :%s " % ORIGINAL_PORT, b" :%d " % self.port)
            if v in self.ports:  # HELLO: a node's port
                v = self.ports[v]
            for orig, ours in self.ports.items():  # CLUSTER NODES: ip:port
                v = v.replace(b"127.0.0.1:%s " % orig, b"127.0.0.1:%s " % ours)
            if self.main_addr:
                v = v.replace(ORIGINAL_MAIN_ADDR, self.main_addr)
            return (kind, v)
        return value

    def expected(self, block):
        """The original's replies as our node should send them: (values,
        bytes).  The bytes are the captured ones with IDs mapped (same
        lengths) unless a port, directory or address had to be replaced
        (or an EXPECTED_ADJUST rule applied); only then are they
        re-encoded."""
        mapped = self.map_ids(block.reply)
        values = golden.parse_replies(mapped)
        subst = [self.substitute(v) for v in values]
        adjust = before_key_lookup(EXPECTED_ADJUST, block)
        if adjust is not None:
            subst = adjust[1](self, subst)
        if subst == values:
            return values, mapped
        return subst, b"".join(encode(v) for v in subst)

    def map_sent(self, block):
        data = self.map_ids(block.sent)
        if block.tag and CLUSTER_TAG.match(block.tag):
            self.node_of(block.tag[0])  # the trio, started on first use
            argv = split_requests(data)
            if any(a in self.ports for x in argv for a in x):  # CLUSTER MEET 127.0.0.1 <port>
                assert len(argv) == 1, block.label
                data = encode_command([self.ports.get(a, a) for a in argv[0]])
        if ORIGINAL_VICTIM_ADDR in data and "victim" in self.conns:
            argv = split_requests(data)
            assert len(argv) == 1, block.label
            data = encode_command([a.replace(ORIGINAL_VICTIM_ADDR, self.conns["victim"].addr) for a in argv[0]])
        return data

    # -- routing --------------------------------------------------------

    def conn_name(self, block):
        """Which connection a block runs on, as the transcript says."""
        if block.tag == "7915":
            return "7915"
        if block.tag == "monitor conn" or "on monitor conn" in block.command:
            return "monitor"
        if block.tag is not None and CLUSTER_TAG.match(block.tag):
            return block.tag[0]
        if block.tag is not None:
            raise AssertionError("%s: no connection for tag %r" % (block.label, block.tag))
        if "(on the killed connection)" in block.command:
            return "victim"
        if "(separate connection)" in block.subsection:
            return "separate: " + block.subsection
        if "each on a fresh connection" in block.section:
            self.fresh_conn("fresh")
            return "fresh"
        if block.title and "new connection" in block.title:
            name = "new: " + block.section
            self.fresh_conn(name)
            self.sticky[block.section] = name
            return name
        return self.sticky.get(block.section, "main")

    # -- replay ---------------------------------------------------------

    def start(self):
        main = self.conn("main")
        self.main_addr = main.addr
        self.my_id = main.call(b"CLUSTER", b"MYID")[1]
        assert re.fullmatch(rb"[0-9a-f]{40}", self.my_id), self.my_id
        prelude = PRELUDE.get(self.file)
        if prelude:
            prelude(self)

    def run(self, blocks):
        self.blocks = blocks
        self.start()
        for block in blocks:
            self.current = block
            for line in block.prose:
                action = PROSE_ACTIONS.get(line)
                if action is None:
                    self.results.append(Result(block, "MISMATCH", "no action for prose line %r" % line))
                    continue
                ids = action(self)
                if ids:
                    self.anon.update(ids)
            if block.index in self.consumed:
                continue
            before = before_action(block)
            if before:
                before[1](self)
            elif block.title and TIMED_TITLE.search(block.title) and (block.file, block.title) not in WAKE:
                self.results.append(Result(block, "MISMATCH", "the title names a delay; no BEFORE entry"))
                continue
            if block.subsection == "CLIENT KILL of another connection" and "victim" not in self.conns:
                # The victim must be registered by the server before the
                # KILL: one round trip.
                self.conn("victim").call(b"PING")
            self.replay(block)

    def send_early(self, block, conn_name):
        """Send ``block`` now on ``conn_name``; it is read when its turn
        comes (its reply then arrives as the transcript shows)."""
        self.conn(conn_name).send(self.map_sent(block))
        self.early[block.index] = (conn_name, time.monotonic())

    def replay(self, block):
        name = self.conn_name(block)
        conn = self.conn(name)
        self.current_node = name if name in ORIGINAL_CLUSTER else "main"
        sent = self.map_sent(block)
        argvs = split_requests(sent) if not block.sent_truncated else []
        busy = [i for i, (n, _) in self.early.items() if n == name and i != block.index]
        if busy:
            self.results.append(Result(block, "MISMATCH", "the connection still waits for the reply of %s" % (
                self.blocks[busy[0]].label), sent=sent))
            return
        if self.is_scan(block, argvs):
            return self.replay_scan(block, conn, argvs[0])
        wake = WAKE.get((block.file, block.title))
        problems = []
        early = block.index in self.early
        if early:  # sent ahead by a BEFORE action
            _, t0 = self.early.pop(block.index)
        else:
            t0 = time.monotonic()
            conn.send(sent)
        if wake is not None:
            early = conn.silence(wake[0], keep=True)
            if early:
                problems.append("replied before the other client acted: %r" % early)
            helper = self.conn("helper")
            helper.send(b"".join(encode_command(a) for a in wake[1]))
        n = block.n_replies
        raw, values, problem = conn.read_replies(n)
        elapsed = time.monotonic() - t0
        if wake is not None:
            _, hv, hp = self.conn("helper").read_replies(len(wake[1]))
            if hp or any(v[0] != "+" for v in hv):
                problems.append("the other client's ADDJOBs failed: %r" % (hv,))
            for v in hv:
                self.anon.add(v[1])
        if problem == "timeout":
            problems.append("no complete reply within %.0fs" % READ_TIMEOUT)
            self.conns.pop(name).close()  # a late reply must not leak into the next block
        elif problem == "closed" and not (block.closed_by_server and len(values) == n):
            problems.append("connection closed by server")
        elif problem == "malformed":
            problems.append("malformed reply")
        floor = _timing_floor(block, argvs[0] if argvs else [], wake)
        if early and argvs and argvs[0][:2] == [b"DEBUG", b"SLEEP"]:
            floor = float(argvs[0][2]) * 0.9  # read when the node woke up
        if not problem and elapsed < floor:
            problems.append("reply after %.2fs, expected the client blocked >= %.2fs" % (elapsed, floor))
        if not problem and block.nothing_more_within is not None:
            extra = conn.silence(SILENCE)
            if extra or conn.eof:
                problems.append("expected nothing more within %.1fs, connection open; got %r%s" % (
                    SILENCE, extra, " and EOF" if conn.eof else ""))
                raw += extra
        if not problem and block.closed_by_server:
            if not conn.wait_closed():
                problems.append("connection not closed by server")
            elif conn.buf:
                problems.append("bytes after the last reply: %r" % conn.buf)
        if block.tag == "7915" and argvs and argvs[0][0].upper() == b"SHUTDOWN":
            try:
                self.nodes["7915"].proc.wait(10)
            except Exception:
                problems.append("SHUTDOWN: the spare node's process did not exit")
        self.compare(block, sent, raw, values, argvs, problems)

    def compare(self, block, sent, raw, values, argvs, problems):
        for i, (e, o) in enumerate(zip(golden.parse_replies(block.reply), values)):
            self.learn_ids(e, o)
            if i < len(argvs):
                self.learn_node_ids(argvs[i], e, o)
        exp_values, expected = self.expected(block)
        key = known_key(block)
        if problems or len(values) != len(exp_values):
            if not problems:
                problems.append("%d replies, expected %d" % (len(values), len(exp_values)))
            status = "MISMATCH"
        elif raw == expected and key in RACES:
            status = "exact"  # the race went the original's way this time
        elif raw == expected and key is not None:
            problems.append("listed in KNOWN_DIFFERENCES (%s) but matches the original" % key)
            status = "MISMATCH"
        elif raw == expected:
            status = "exact"
        elif key is not None:
            self.known_used.add(key)
            check = KNOWN_CHECKS.get(key)
            status = "known"
            if check is not None:
                for e, o in zip(exp_values, values):
                    problems += check(e, o, self)
                if problems:
                    status = "MISMATCH"
        else:
            status = "normalized"
            for i, (e, o) in enumerate(zip(exp_values, values)):
                if e == o:
                    continue
                argv = argvs[i] if i < len(argvs) else (argvs[0] if argvs else [])
                norm = pick_normalizer(argv, block)
                if norm is None or e[0] == "-":  # errors are never normalized
                    problems.append("differs")
                else:
                    problems += norm(e, o, self)
            if problems:
                status = "MISMATCH"
        self.results.append(Result(block, status, "; ".join(problems), expected, raw, sent))

    # -- SCAN -----------------------------------------------------------

    def is_scan(self, block, argvs):
        if len(argvs) != 1 or argvs[0][0].upper() not in (b"QSCAN", b"JSCAN"):
            return False
        exp, _ = parse_reply(block.reply)
        return scan_parts(exp) is not None

    def scan_group(self, block, argv):
        """The block and the following ones that continue its iteration
        with the original's cursors."""
        group = [block]
        ci = scan_cursor_index(argv)
        rest = argv[:ci] + argv[ci + 1:] if ci is not None else argv
        cursor = scan_parts(parse_reply(block.reply)[0])[0]
        for nxt in self.blocks[block.index + 1:]:
            if cursor == b"0":
                break
            nargv = split_requests(self.map_ids(nxt.sent))
            if len(nargv) != 1 or nargv[0][0] != argv[0]:
                break
            nci = scan_cursor_index(nargv[0])
            if nci is None or nargv[0][nci] != cursor or nargv[0][:nci] + nargv[0][nci + 1:] != rest:
                break
            exp = scan_parts(parse_reply(nxt.reply)[0])
            if exp is None:
                break
            group.append(nxt)
            cursor = exp[0]
        return group, cursor == b"0"

    def scan_all(self, conn, argv, cursor=b"0"):
        """Follow our cursors from ``cursor`` to 0 with ``argv``'s options;
        (items, problems)."""
        ci = scan_cursor_index(argv)
        base = argv[:ci] + argv[ci + 1:] if ci is not None else list(argv)
        items = []
        for _ in range(10000):
            value = conn.call(*(base[:1] + [cursor] + base[1:]))
            parts = scan_parts(value)
            if parts is None:
                return items, ["bad SCAN reply %r" % (value,)]
            cursor, got = parts
            items += got
            if cursor == b"0":
                return items, []
        return items, ["SCAN did not terminate"]

    def replay_scan(self, block, conn, argv):
        group, complete = self.scan_group(block, argv)
        ci = scan_cursor_index(argv)
        start_cursor = argv[ci] if ci is not None else b"0"
        fresh = start_cursor == b"0"
        our_cursor = None
        our_items = []
        exp_items = []
        for i, b in enumerate(group):
            self.consumed.add(b.index)
            (exp,), expected = self.expected(b)
            exp_cursor, items = scan_parts(exp)
            exp_items += items
            if i == 0:
                sent = self.map_sent(b)
            elif our_cursor is None:
                self.results.append(Result(b, "MISMATCH", "not replayed: the iteration failed before",
                                           expected, b"", b""))
                continue
            elif our_cursor == b"0":
                # Our iteration ended before the original's: nothing to send.
                self.results.append(Result(b, "normalized", "covered by the iteration of %s" % block.where,
                                           expected, b"", b""))
                continue
            else:
                bargv = split_requests(self.map_ids(b.sent))[0]
                bci = scan_cursor_index(bargv)
                bargv[bci] = our_cursor
                sent = encode_command(bargv)
            conn.send(sent)
            raw, values, problem = conn.read_replies(1)
            problems = []
            ours = scan_parts(values[0]) if values else None
            if problem or ours is None:
                problems.append("bad SCAN reply (%s)" % problem)
                our_cursor = None
            else:
                our_cursor, got = ours
                our_items += got
                kinds = {x[0] for x in items + got}
                if len(kinds) > 1:
                    problems.append("item types differ: %r" % kinds)
            status = "exact" if raw == expected else "normalized"
            self.results.append(Result(b, "MISMATCH" if problems else status, "; ".join(problems),
                                       expected, raw, sent))
        last = self.results[-1]
        if our_cursor is None:
            return
        problems = []
        if our_cursor != b"0":
            more, p = self.scan_all(conn, argv, our_cursor)
            our_items += more
            problems += p
        universe, p = self.scan_all(conn, argv)
        problems += p
        key = known_key(block)
        if key in KNOWN_SCAN_MISSING:
            missing = KNOWN_SCAN_MISSING[key](self)
            exp_items = [x for x in exp_items if scan_key(x) not in missing]
            if missing & {scan_key(x) for x in our_items + universe}:
                problems.append("listed in KNOWN_DIFFERENCES (%s) but %r is there" % (key, sorted(missing)))
        if complete and fresh:
            problems += self.compare_item_sets(exp_items, our_items, "iteration")
            problems += self.compare_item_sets(exp_items, universe, "full scan")
        else:
            # A partial iteration (the original stopped, or started at an
            # arbitrary cursor): both sides must be part of the full scan.
            problems += self.compare_item_sets(exp_items, universe, "full scan", subset=True)
            ours, full = {scan_key(x) for x in our_items}, {scan_key(x) for x in universe}
            if not ours <= full or (fresh and ours != full):
                problems.append("our iteration %r does not match our full scan %r" % (
                    sorted(ours), sorted(full)))
        problems += self.check_scan_records(exp_items, our_items)
        if problems:
            last.status = "MISMATCH"
            last.detail = "; ".join(filter(None, [last.detail] + problems))
        elif key in KNOWN_SCAN_MISSING:
            self.known_used.add(key)
            for res in self.results[-len(group):]:
                res.status = "known"

    def compare_item_sets(self, exp_items, our_items, what, subset=False):
        ek = {scan_key(x) for x in exp_items}
        ok = {scan_key(x) for x in our_items}
        unknown = {k for k in ek if JOB_ID_FULL.match(k) and k not in self.idmap.values()
                   and k[2:10] != self.my_id[:8]}
        ek -= unknown
        extra = ok - ek
        if subset:
            if not ek <= ok:
                return ["%s: missing %r" % (what, sorted(ek - ok))]
            return []
        problems = []
        if ek - ok:
            problems.append("%s: missing %r" % (what, sorted(ek - ok)))
        if len(extra) != len(unknown) or not extra <= self.anon:
            problems.append("%s: %d unexpected items %r (the original had %d jobs we only know as "
                            "'not shown')" % (what, len(extra), sorted(extra - self.anon), len(unknown)))
        return problems

    def check_scan_records(self, exp_items, our_items):
        """JSCAN REPLY all: every record of ours against the original's."""
        exp_records = {scan_key(x): x for x in exp_items if x[0] == "*"}
        problems = []
        for o in our_items:
            if o[0] == "*" and scan_key(o) in exp_records:
                problems += check_job_record(exp_records[scan_key(o)], o, self)
        return problems


# ======================================================================
# The tests
# ======================================================================

SUMMARY = {}


@pytest.mark.parametrize("file", sorted({f for f, _ in FILES}))
def test_transcript_is_well_formed(file):
    """Every block (cluster.md: all of it) parses, its reply has the
    announced size and is canonical RESP, so that comparing re-encoded
    replies loses nothing."""
    blocks = golden.parse_file(file)
    assert blocks
    for b in blocks:
        replies = golden.parse_replies(b.reply)
        assert len(replies) == b.n_replies, b.label
        assert b"".join(encode(v) for v in replies) == b.reply, b.label
        assert b.sent or b.command.startswith("(read pending output"), b.label


@pytest.mark.parametrize("file,stop_at", FILES, ids=[f for f, _ in FILES])
def test_golden(file, stop_at, tmp_path):
    blocks = golden.parse_file(file, stop_at=stop_at)
    assert blocks, file
    r = Replayer(file, tmp_path)
    try:
        r.run(blocks)
    finally:
        r.close()
    counts = {}
    for res in r.results:
        counts[res.status] = counts.get(res.status, 0) + 1
    replayed = {res.block.index for res in r.results}
    SUMMARY[file] = (len(blocks), counts, sorted(r.known_used))
    print("\n%s: %d blocks, %s; known differences used: %s" % (
        file, len(blocks), ", ".join("%s %d" % kv for kv in sorted(counts.items())), sorted(r.known_used)))
    assert replayed == {b.index for b in blocks}, "blocks not replayed: %r" % sorted(
        {b.index for b in blocks} - replayed)
    bad = [res for res in r.results if res.status == "MISMATCH"]
    assert not bad, "%d of %d blocks differ from the original:\n\n%s" % (
        len(bad), len(blocks), "\n\n".join(res.describe() for res in bad))
