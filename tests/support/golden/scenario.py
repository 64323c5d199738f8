"""Scenario: what the transcripts describe in words, as tables of actions.

Some blocks need other connections or other clients acting meanwhile, a
delay, or jobs created off-screen; the transcripts say so in words (tags,
titles, notes, prose lines in parentheses).  Each table below maps such a
sentence to what the replayer does.  Nothing is skipped: a prose line
without an entry in :data:`PROSE_ACTIONS`, or a title naming a delay
("0.3s later") without a :data:`BEFORE` entry, fails the replay.

Actions receive the replayer (``golden.replayer.Replayer``) and use its
connections (``r.conn(name)``), ``r.setup_call`` for commands the
transcript implies but does not show, and its identity maps.
"""

import re
import time

from .originals import LEAVING_JOB, ORIGINAL_CLUSTER
from .resp import fields, set_field


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
    """The entry of a table keyed like BEFORE for ``block``, or None."""
    for key in (block.title, "[%s] > %s" % (block.tag, block.command) if block.tag else None, block.command):
        if key is not None and (block.file, key) in table:
            return table[(block.file, key)]
    return None


def before_action(block):
    return before_key_lookup(BEFORE, block)


def _leaving_job_queued_on_b(r):
    """Did our C pick B?  Asked once (after the reply of the first block
    that depends on it was read), with SHOW on helper connections to A and
    B every 10 ms until one of them has the job queued (SHOW changes
    nothing)."""
    if r.leaving_job_on_b is None:
        our = r.idmap[LEAVING_JOB]

        def state(name):
            record = r.conn(name + " helper").call(b"SHOW", our)
            return record[0] == "*" and record[1] is not None and dict(fields(record)).get(b"state")

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
    records = [set_field(x, b"state", ("$", b"active")) if dict(fields(x)).get(b"id") == ("$", our) else x
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


# Commands a transcript implies before its first block: file -> action.
PRELUDE = {"admin.md": _admin_prelude}


def timing_floor(block, argv, wake):
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
