"""Schedules: recurring jobs that every node fires, and that are added once.

A schedule (its definition: :mod:`disque.core.cronspec`) is a catalog
entry of kind ``schedule``; every node holds it (:mod:`disque.core.settings`).
Its progress, the last run fired or skipped, is an entry of kind ``fired``
whose stamp is that run's time: the latest run wins everywhere.

**How a run is added once.** Every node that is up may fire each run, and
they agree on what firing makes:

* the job's ID is derived from (schedule, version, fire time)
  (:func:`run_id`), and its DEDUP key names the run (:func:`run_key`): the
  job several nodes make for one run is the same job (as for dead letters,
  :mod:`disque.core.deadletter`): a node that holds it, or consumed it
  within ``dedup-window``, adds nothing;
* nodes take turns: for each run the nodes that keep the catalog, minus the
  ones this node believes failing, are ranked by a hash of (schedule, run,
  node ID), the same order on every node; time from the run's is cut in
  steps of ``BACKUP_STEP_MS`` dealt to the nodes by rank, round and round
  (:meth:`Recurring.my_turn`), and a node fires only in its own steps,
  unless it has heard by then that the run was added.  In a healthy
  cluster the first-ranked node fires and the others only learn of it;
* a run counts as fired once its job is added with its copies (REPLICATE,
  as ADDJOB: the copies confirmed), or, when they are not all confirmed
  within ``FIRE_TIMEOUT_MS``, with the copies it has: the firing node then
  sends its progress to every node.  A run's job is never voided as an
  ADDJOB's that got NOREPL: a void could delete a copy another node
  already counts as the run, and miss a copy on a node that was down,
  whose RETRY would later bring back a run made again meanwhile.  If the
  creator dies first, the next-ranked node fires the run (with the same
  ID): no run is skipped while one node is up;
* a copy of the run held by another node counts as the run added once it
  is queued or acknowledged, or older than ``COPY_GRACE_MS`` (its creator
  confirmed or kept it by then, or died: the copy's RETRY requeues it).

**A node that may have missed news fires nothing** until it is *settled*:
every peer it hears from has answered its catalog exchange (so it holds
the cluster's latest progress), and every peer it does not hear from has
had ``node_timeout`` to speak.  A node is unsettled when it starts and when
it notices it was paused (its periodic call came ``PAUSE_GAP_MS`` late):
it asks every peer again.

**Catch-up.** A run that nobody fired and that was due more than
:meth:`Recurring.late_window` before this node came back (started or
resumed) is *late*: a node up then would have added it, so none was; the
schedule's CATCHUP policy says what happens to late runs:
``skip`` (the default) drops them, ``one`` fires the last of them, ``all``
fires each of them in order (at most ``MAX_RUNS_PER_CALL`` at a time).
Runs due within the late window are fired as any run, whatever the
policy: a node cannot tell the whole cluster's outage from a peer that
was up and still trying.  A run the queue refuses (MAXLEN, PAUSED)
is skipped.  With fewer nodes reachable than its REPLICATE, a run is
added with the copies it can get (no run is skipped while one node is
up); one whose copies are not confirmed in time is tried again.

**What this does not promise.** Two nodes that disagree on which peers are
failing, or a partition with a node on each side, can fire one run on two
sides: it is still one job ID, and when the sides meet the job is queued
once (the lower node ID stands down, as for any job queued twice), but a
consumer on each side may each have got it: at least once, as every
Disque job.  A schedule changed on both sides of a partition converges to
one version when it heals (the catalog's rule); runs fired meanwhile
carry their side's version in their IDs.  Nodes' clocks must agree to
well within ``BACKUP_STEP_MS``.

Nothing here reads a clock: :meth:`Recurring.cron` gets the node's ``now``.
"""

import hashlib
import struct
from binascii import b2a_base64

from .addjob import KEPT
from .cronspec import (CATCHUP_ALL, CATCHUP_ONE, BadSpec, decode_spec, fire_times, next_fire)
from .effects import Notice
from .errors import CommandError
from .job import ACKED, QUEUED, WAIT_REPL, default_retry
from .jobid import ttl_suffix

KIND = b"schedule"
PROGRESS = b"fired"
BACKUP_STEP_MS = 1000  # the wait between one rank and the next
FIRE_TIMEOUT_MS = 2000  # a run's copies not all confirmed within this: kept with those it has
COPY_GRACE_MS = FIRE_TIMEOUT_MS + BACKUP_STEP_MS  # a copy older than this was confirmed or kept, or its creator died
PAUSE_GAP_MS = 500  # periodic calls (every 100 ms at hz 10) this far apart: this node was paused
MAX_RUNS_PER_CALL = 100
MAX_NAME_LEN = 200
_PROGRESS = struct.Struct(">QQQ")  # the fired entry's value: version, runs, skipped


def run_id(name: bytes, version: int, fire_ms: int, ttl: int, retry: int) -> bytes:
    """The job ID of the run of schedule ``name`` (at ``version``) due at
    ``fire_ms``: the same on every node, with the TTL and delivery
    guarantee of its options in the suffix, as every ID."""
    digest = hashlib.sha256(b"schedule:%b\x00%d\x00%d" % (name, version, fire_ms)).digest()
    return b"D-" + digest[:4].hex().encode() + b"-" + b2a_base64(digest[4:22], newline=False) \
        + ttl_suffix(ttl, retry)


def run_key(name: bytes, fire_ms: int) -> bytes:
    """The DEDUP key of a run (SHOW shows it: which schedule, which time)."""
    return b"schedule:%b@%d" % (name, fire_ms)


class Progress:
    """What the cluster knows of a schedule's runs (its ``fired`` entry)."""

    __slots__ = ("last", "version", "runs", "skipped")

    def __init__(self, last=0, version=0, runs=0, skipped=0):
        self.last = last  # ms of the last run fired or skipped
        self.version = version
        self.runs = runs  # runs fired, cluster-wide, as far as the last firing node knew
        self.skipped = skipped


class Recurring:
    def __init__(self, node):
        self.node = node
        self.specs = {}  # name -> (version, ScheduleSpec): the live schedules
        self.progress = {}  # name -> Progress
        self._next = {}  # name -> the next run owed (ms)
        self._pending = {}  # name -> run being fired here, waiting for its copies
        self.fired_here = {}  # name -> runs this node fired
        self.errors = {}  # name -> the last reason a run could not fire here
        self.fired = 0  # runs fired by this node (INFO)
        self.skipped = 0  # late or refused runs this node skipped
        self.settled = False
        self._since = None  # when this node (re)started listening for news
        self._last_call = None
        node.settings.on(KIND, self._on_schedule)
        node.settings.on(PROGRESS, self._on_progress)

    # -- the catalog ---------------------------------------------------------------

    def _on_schedule(self, entry) -> None:
        name = entry.name
        if entry.deleted:
            self.specs.pop(name, None)
            self._next.pop(name, None)
            return
        try:
            spec = decode_spec(entry.value)
        except BadSpec:
            return  # a newer version's definition: kept in the catalog, not run here
        self.specs[name] = (entry.stamp, spec)
        self._reckon(name)

    def _on_progress(self, entry) -> None:
        try:
            version, runs, skipped = _PROGRESS.unpack(entry.value)
        except struct.error:
            return
        self.progress[entry.name] = Progress(entry.stamp, version, runs, skipped)
        self._reckon(entry.name)

    def _reckon(self, name) -> None:
        """The next run owed of ``name``, after its progress."""
        held = self.specs.get(name)
        if held is not None:
            p = self.progress.get(name)
            self._next[name] = next_fire(held[1], p.last if p is not None else 0)

    def get(self, name):
        """``(version, spec)`` of a live schedule, or None."""
        return self.specs.get(name)

    def upcoming(self, name, count: int) -> list:
        """The next ``count`` runs owed of ``name`` (ms)."""
        version, spec = self.specs[name]
        p = self.progress.get(name)
        out = []
        t = p.last if p is not None else 0
        for _ in range(count):
            t = next_fire(spec, t)
            out.append(t)
        return out

    # -- firing --------------------------------------------------------------------

    def cron(self, now: int) -> None:
        """Fire what is due (the node's tick calls it)."""
        last, self._last_call = self._last_call, now
        if self._since is None:
            self._since = now
        elif last is not None and now - last > PAUSE_GAP_MS:
            self.unsettle(now)
        if not self.specs:
            return
        if not self.settled and not self._settle(now):
            return
        for name in list(self.specs):
            if name not in self._pending and self._next.get(name, now + 1) <= now:
                self._due(name, now)

    def unsettle(self, now: int) -> None:
        """Fire nothing until the catalog is exchanged again with every
        peer that can be heard (this node was paused, or just started)."""
        self.settled = False
        self._since = now
        self.node.settings.resync()

    def _settle(self, now: int) -> bool:
        since = self._since
        answered = self.node.settings.answered
        cluster = self.node.cluster
        for peer in cluster.peers():
            if peer.handshake:
                continue
            if max(peer.pong_received, peer.ping_received) >= since:
                if peer.settings and peer.id not in answered:
                    return False
            elif now - since < cluster.node_timeout:
                return False
        self.settled = True
        return True

    def _eligible(self) -> list:
        """The nodes that take turns firing: this one, and the peers that
        keep the catalog and are not believed failing or leaving."""
        cluster = self.node.cluster
        return [cluster.my_id] + [p.id for p in cluster.peers()
                                  if p.settings and not (p.handshake or p.pfail or p.fail or p.leaving)]

    def _due(self, name, now) -> None:
        version, spec = self.specs[name]
        if spec.paused:
            return
        p = self.progress.get(name)
        times = fire_times(spec, p.last if p is not None else 0, now, MAX_RUNS_PER_CALL)
        if not times:
            return
        nodes = self._eligible()
        # Late: due so long before this node came back (started, resumed)
        # that a node up then would have added it, even one that had to
        # wait for a silent peer to be suspected before making fewer copies.
        horizon = self._since - self.late_window(len(nodes))
        late = [t for t in times if t < horizon]
        if late and spec.catchup != CATCHUP_ALL:
            dropped = late[:-1] if spec.catchup == CATCHUP_ONE else late
            if dropped:
                self._skip(name, version, dropped[-1], len(dropped), "due while no node was up: CATCHUP %s"
                           % ("one" if spec.catchup == CATCHUP_ONE else "skip"))
                times = times[len(dropped):]
                if not times:
                    return
        t = times[0]
        if self.my_turn(name, t, nodes, now):
            self._fire(name, version, spec, t)

    def my_turn(self, name, t, nodes, now) -> bool:
        """Whether ``now`` is in one of this node's turns for run ``t``:
        the run's time is cut in steps of ``BACKUP_STEP_MS`` from ``t``,
        dealt to ``nodes`` in their rank order, round and round (rank 0
        has steps 0, n, 2n...).  One node a step: two nodes never fire a
        run at once."""
        if now < t:
            return False
        step = (now - t) // BACKUP_STEP_MS
        rank = self._rank(name, t, nodes)
        return step >= rank and (step - rank) % len(nodes) == 0

    def late_window(self, nodes: int) -> int:
        """How long before this node came back an unfired run is still
        owed whatever the CATCHUP policy (ms): every node's turn, a
        replication deadline, and the time to suspect a silent peer."""
        return (nodes - 1) * BACKUP_STEP_MS + FIRE_TIMEOUT_MS + self.node.cluster.node_timeout

    def _rank(self, name, t, nodes) -> int:
        """This node's turn for run ``t`` among ``nodes``: 0 fires at ``t``,
        ``r`` at ``t + r * BACKUP_STEP_MS`` (the same order on every node)."""
        return sorted(nodes, key=lambda n: hashlib.sha256(b"%b\x00%d\x00%b" % (name, t, n)).digest()) \
            .index(self.node.my_id)

    def _fire(self, name, version, spec, t) -> None:
        node = self.node
        ttl = spec.ttl
        retry = spec.retry if spec.retry >= 0 else default_retry(ttl)
        job_id = run_id(name, version, t, ttl, retry)
        key = run_key(name, t)
        copy = node.jobs.get(job_id)
        if copy is not None:
            # A copy of another node's run: proof the run was added once it
            # is queued or acknowledged, or once its creator had the time
            # to confirm it or keep it with the copies it had (a creator
            # that died before either leaves copies that their RETRY
            # requeues).  Before that: wait, the creator is still at it.
            if copy.state in (QUEUED, ACKED) or node.now - copy.created_ms() >= COPY_GRACE_MS:
                self._record(name, version, t, fired=False)
            return
        if node.jobs.dedup.find(spec.queue, key, node.now) is not None:
            self._record(name, version, t, fired=False)  # consumed here within the dedup window
            return
        repl = spec.repl or node.cluster.default_replication()
        room = node.cluster.room_for_copies() + 1
        if repl > room:
            # Fewer nodes up than copies asked for: the run is added with
            # the copies it can get rather than not at all (no run is
            # skipped while one node is up); SHOW's repl says how many.
            self.errors[name] = b"NOREPL %d of %d copies: fewer nodes reachable" % (room, repl)
            repl = room
        try:
            job = node.addjob.add(spec.queue, spec.body, repl, spec.delay, retry, ttl, spec.maxlen, False,
                                  key, spec.opts, job_id)
        except CommandError as e:
            self.errors[name] = e.code + b" " + e.message
            if e.code in (b"MAXLEN", b"PAUSED"):
                self._skip(name, version, t, 1, "the queue refused it: %s" % e.code.decode())  # not owed later
            return  # NOREPL: tried again at the next call (and by the next-ranked node)
        if job.state == WAIT_REPL:
            self._pending[name] = t
            node.addjob.await_copies(job, FIRE_TIMEOUT_MS, lambda ok: self._replicated(name, version, t, ok))
        else:
            self._record(name, version, t, fired=True)

    def _replicated(self, name, version, t, ok) -> None:
        """The outcome of a run fired here: its copies came (True), not
        all within ``FIRE_TIMEOUT_MS`` (``KEPT``: added with the copies it
        has), or the job went away meanwhile (False: fired again at the
        next turn)."""
        self._pending.pop(name, None)
        if ok:
            self._record(name, version, t, fired=True)
            if ok is KEPT:
                self.errors[name] = b"NOREPL copies not all confirmed within %d ms: run %d kept with the copies " \
                    b"it had" % (FIRE_TIMEOUT_MS, t)
                self.node.outbox.append(Notice(
                    "Schedule %s: run %d added with fewer copies than asked: not all confirmed within %d ms" % (
                        name.decode("utf-8", "replace"), t, FIRE_TIMEOUT_MS), key=(b"kept", name)))
        else:
            self.errors[name] = b"the job of run %d went away before its copies were confirmed" % t

    def _record(self, name, version, t, fired) -> None:
        p = self.progress.get(name) or Progress()
        if fired:
            self.fired += 1
            self.fired_here[name] = self.fired_here.get(name, 0) + 1
        self.node.settings.advance(PROGRESS, name, t, _PROGRESS.pack(version, p.runs + 1, p.skipped))

    def _skip(self, name, version, t, count, why) -> None:
        p = self.progress.get(name) or Progress()
        self.skipped += count
        self.node.outbox.append(Notice("Schedule %s: %d run%s up to %d skipped (%s)" % (
            name.decode("utf-8", "replace"), count, "" if count == 1 else "s", t, why), key=(b"skip", name)))
        self.node.settings.advance(PROGRESS, name, t, _PROGRESS.pack(version, p.runs, p.skipped + count))

    def clear(self) -> None:
        """CLUSTER RESET HARD: a fresh node knows no schedule."""
        self.specs.clear()
        self.progress.clear()
        self._next.clear()
        self._pending.clear()
        self.fired_here.clear()
        self.errors.clear()
