"""The fault-injection suite: a randomised workload against a real local
cluster, a nemesis, and a checker of what the clients saw.

    python -m tests.tools.faults --nodes 5 --seconds 60 --seed 1 \\
        --nemesis kill,kill-aof,stop,partition,kill-all --appendfsync always

Run it with the Python of a virtualenv that has the project and its test
extras installed (the nodes are that environment's ``twistd -n disque``).

Each nemesis gets a phase of its own, on a fresh cluster in a temporary
directory: node i listens on 127.0.0.<base+i> (clients and bus) and its bus
links leave from that address.  For ``--seconds``, producers add jobs
(``ADDJOB ... REPLICATE 3 RETRY 1``, random nodes, every body unique and
recorded before it is sent, its ID when it comes back) and consumers take
them (``GETJOB`` from random nodes, every delivery recorded, then
``ACKJOB``), while the nemesis, on a schedule drawn from ``--seed``, does:

``kill``       kill -9 one or more nodes, restart them (no AOF: they come
               back empty);
``kill-aof``   the same with ``appendonly yes`` and ``--appendfsync``;
``stop``       SIGSTOP one or more nodes, SIGCONT them;
``partition``  split the nodes in two sides and DROP the bus between them
               (iptables, see ``tests/tools/netfilter.py``), then heal; skipped
               with the reason when rules cannot be set here;
``kill-all``   pause the consumers until a backlog builds, resume them
               and, while they take it (``--take-before-kill``), kill -9
               every node at once; restart them all with the AOF.

The storage nemeses (the AOF on; each node's files in ``nodeI/data``, its
log beside, so the log is never what fails; ``tests/tools/faultdisk.py``):

``disk-full-one``, ``disk-full-all``
               every node's data directory is a tmpfs of ``--disk-size``
               (root only: skipped with the reason otherwise); fill the
               one of one node, or of every node, with a filler file
               (leaving 0-2 pages: a short write, then ENOSPC), free it
               after 1-4 s.  Clients get -MISCONF meanwhile: refusals,
               counted apart, not losses;
``corrupt``    kill -9 a minority of the nodes, damage their AOF (a torn
               tail, a cut in the middle; bit flips in the middle only
               when the node has a directive to load past damaged
               records, set on every node of the phase), restart them;
``power-cut``  like ``kill-all``, through ``tests/tools/faultnode.py``, which
               logs every fsync and rename the nodes make; after the kill
               each node's files are cut back to what their last fsync
               covered and renames no directory fsync made durable are
               undone.  The guarantee holds with ``appendfsync always``
               only: with ``everysec`` (about a second) and ``no`` losses
               are reported, not failed.

Then everything is healed, the producers stop and the consumers drain
until nothing came for ``--quiet`` seconds and no node holds a job it could
still deliver (JSCAN of each node), or ``--drain`` seconds passed.
``tests/tools/faultcheck.py`` gives the verdict: lost (acknowledged, never
delivered, held by no node), held (acknowledged, never delivered, still
held by a node at the drain's bound), unexpected, duplicate %, and crashes
(a node process that exited without the nemesis killing it or could not
restart, or a Traceback in a node's log).  Every
delivery's time, node and consumer are traced: for ``kill-all`` the
report counts apart the duplicates of jobs delivered before a kill of
every node and again after it (ACKs in flight at the kill), and
``--json`` keeps the traces of up to 200 duplicated jobs.

Exit status 1 when a phase lost an acknowledged job where the guarantee
holds (every nemesis except ``kill``, ``power-cut`` without ``appendfsync
always``, and every one with ``--no-aof`` but ``stop`` and ``partition``:
a node restarted without its AOF has forgotten its copies), still held
acknowledged jobs at the drain's bound, delivered an unexpected job, or
saw a crash; 0 otherwise.  ``--json FILE`` writes the whole report.
"""

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter

from tests.support.process import Client, NodeProcess, join_nodes, wait_full_mesh
from tests.tools import faultdisk, netfilter
from tests.tools.faultcheck import LIVE, UNKNOWN, check, drain_over

STORAGE = ("disk-full-one", "disk-full-all", "corrupt", "power-cut")
NEMESES = ("kill", "kill-aof", "stop", "partition", "kill-all") + STORAGE
QUEUE = "faults"
BUS_PORT_OFFSET = 10000
ADDJOB_TIMEOUT_MS = 2000
FULL_WAIT = 10.0  # s a full disk may be held past its hold, until a client was refused
AOF_NAME = "disque.aof"  # appendfilename's default
FAULTNODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faultnode.py")  # run as a script


def skip_damaged_directive():
    """``name=value``: the directive that makes a node start past the damaged
    records of its AOF (``aof-load-damaged skip``), or None when this
    version has none."""
    try:
        from disque.config import SPECS
    except ImportError:
        return None
    for spec in SPECS:
        if spec.name == "aof-load-damaged" and "skip" in (getattr(spec, "choices", None) or ()):
            return "aof-load-damaged=skip"
    return None


class History:
    """What the clients saw, shared by the workload's threads (one lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.attempted = set()
        self.acked = {}
        self.acked_at = {}  # job id -> time its ADDJOB answered
        self.deliveries = []
        self.delivered = set()
        self.trace = {}  # job id -> [(time, node index)] of its deliveries
        self.last_delivery = time.time()
        self.errors = Counter()

    def attempt(self, body):
        with self.lock:
            self.attempted.add(body)

    def ack(self, job_id, body):
        with self.lock:
            self.acked[job_id] = body
            self.acked_at[job_id] = time.time()

    def deliver(self, jobs, node, consumer):
        """``jobs`` (id, body) handed out by node index ``node`` to consumer
        thread ``consumer`` in one GETJOB reply."""
        now = time.time()
        with self.lock:
            self.deliveries.extend(jobs)
            self.delivered.update(job_id for job_id, _ in jobs)
            for job_id, _ in jobs:
                self.trace.setdefault(job_id, []).append((round(now, 3), node, consumer))
            self.last_delivery = now

    def error(self, what):
        with self.lock:
            self.errors[what] += 1

    def misconf_refusals(self) -> int:
        """How many requests a node refused with -MISCONF (its disk failed)."""
        with self.lock:
            return sum(n for what, n in self.errors.items() if what.endswith(" MISCONF"))

    def missing(self):
        """How many acknowledged jobs were not delivered yet."""
        with self.lock:
            return sum(1 for job_id in self.acked if job_id not in self.delivered)


class FaultNode(NodeProcess):
    """A node whose files (AOF, node file) are in ``datadir`` when given
    (its log stays in its own directory, outside), started through
    ``tests/tools/faultnode.py`` when ``synclog`` is given."""

    def __init__(self, workdir, datadir=None, synclog=None, **kw):
        super().__init__(workdir, **kw)
        self.datadir = datadir or self.workdir
        self.synclog = synclog
        os.makedirs(self.datadir, exist_ok=True)

    def command(self):
        cmd = super().command()
        cmd[cmd.index("--dir") + 1] = self.datadir
        if self.synclog:
            cmd = [sys.executable, FAULTNODE, self.synclog] + cmd[1:]
        return cmd

    @property
    def aof(self):
        return os.path.join(self.datadir, AOF_NAME)


class Cluster:
    """The nodes of one phase, what the nemesis did to them, and the crashes
    it did not cause (found by :meth:`watch`).  ``data``: each node's files
    in ``nodeI/data`` -- a tmpfs of ``disk_size`` bytes when ``disks`` (a
    ``faultdisk.Disks``) is given; ``synclog``: nodes run through
    ``tests/tools/faultnode.py``, logging to ``nodeI/synclog``."""

    def __init__(self, workdir, hosts, args, data=False, disks=None, disk_size=None, synclog=False):
        self.nodes = []
        for i, host in enumerate(hosts):
            home = os.path.join(workdir, "node%d" % i)
            datadir = os.path.join(home, "data") if data or disks is not None else None
            if disks is not None:
                disks.mount(datadir, disk_size)
            self.nodes.append(FaultNode(home, datadir=datadir, synclog=synclog and os.path.join(home, "synclog"),
                                        args=args, host=host))
        join_nodes(self.nodes, timeout=60, ready_timeout=60)
        self.down = set()      # killed by the nemesis, not restarted yet
        self.stopped = set()   # SIGSTOPped
        self.dead = set()      # could not restart: left down
        self.crashes = []
        self.lock = threading.RLock()

    def bus(self, i):
        node = self.nodes[i]
        return node.host, node.port + BUS_PORT_OFFSET

    def kill(self, indexes):
        """kill -9 all of ``indexes`` at once."""
        with self.lock:
            self.down.update(indexes)
            for i in indexes:
                self.nodes[i].proc.send_signal(signal.SIGKILL)
        for i in indexes:
            self.nodes[i].proc.wait()

    def restart(self, indexes):
        """Start ``indexes`` again; a node that cannot (it exits: its AOF
        refused, say; or is not ready in 120 s) is a crash, left down."""
        indexes = [i for i in indexes if i not in self.dead]
        for i in indexes:
            node = self.nodes[i]
            node.proc.stdout.close()
            node.start(wait=False)
        for i in indexes:
            node = self.nodes[i]
            try:
                node.wait_ready(timeout=120)
            except RuntimeError as e:
                node.kill()
                with self.lock:
                    self.dead.add(i)
                    self.crashes.append({"node": i, "returncode": node.proc.returncode, "at": time.time(),
                                         "restart_failed": True, "log_tail": str(e)[-3000:]})
                continue
            with self.lock:
                self.down.discard(i)

    def pause(self, indexes, sig):
        """SIGSTOP or SIGCONT ``indexes``."""
        with self.lock:
            if sig == signal.SIGSTOP:
                self.stopped.update(indexes)
            else:
                self.stopped.difference_update(indexes)
            for i in indexes:
                self.nodes[i].proc.send_signal(sig)

    def heal(self):
        self.pause(sorted(self.stopped), signal.SIGCONT)
        self.restart(sorted(self.down - self.dead))

    def watch(self):
        """Record nodes that exited on their own; they stay down until
        :meth:`heal` (restarts happen on the main thread: a node dies with
        the thread that started it, PR_SET_PDEATHSIG)."""
        with self.lock:
            for i, node in enumerate(self.nodes):
                if i in self.down or i in self.dead or node.proc.poll() is None:
                    continue
                self.crashes.append({"node": i, "returncode": node.proc.returncode, "at": time.time(),
                                     "log_tail": node.log()[-3000:]})
                self.down.add(i)

    def tracebacks(self):
        """{node index: number of tracebacks in its log} for logs with any."""
        counts = {i: node.log().count("Traceback") for i, node in enumerate(self.nodes)}
        return {i: n for i, n in counts.items() if n}

    def backlog(self):
        """Jobs queued on the nodes now (QLEN summed), None if one failed."""
        total = 0
        for node in self.nodes:
            try:
                total += Session.once(node, "QLEN", QUEUE)
            except (OSError, ConnectionError, TypeError):
                return None
        return total

    def holdings(self):
        """Per node, ``{job id: state}`` of the jobs of the queue it holds
        (JSCAN; acked ones included); None for a node down or that could
        not say; ``{}`` for a node that could not restart (it holds nothing
        any more, and is a crash already)."""
        out = []
        for i, node in enumerate(self.nodes):
            with self.lock:
                dead = i in self.dead
                gone = i in self.down or i in self.stopped
            out.append({} if dead else None if gone else _held(node))
        return out

    def holding(self):
        """Jobs held in a live state (one that can still be delivered),
        summed over the nodes; None when a node could not say."""
        held = self.holdings()
        if any(h is None for h in held):
            return None
        return sum(1 for h in held for state in h.values() if state in LIVE)

    def stop(self):
        """Stop every node (after the heal: restarted, continued)."""
        try:
            self.heal()
        finally:
            self.kill_all_quietly()

    def kill_all_quietly(self):
        with self.lock:
            self.down.update(range(len(self.nodes)))
        for node in self.nodes:
            if node.proc is None:
                continue
            if node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGCONT)
            node.stop()
            if not node.proc.stdout.closed:
                node.proc.stdout.close()


def _held(node):
    """``{job id: state}`` for the jobs of the queue ``node`` holds, or None
    when it cannot say (down, loading, silent)."""
    try:
        c = Client(node.port, host=node.host, timeout=10)
    except OSError:
        return None
    try:
        out = {}
        for state in LIVE + ("acked",):
            reply = c.call("JSCAN", "0", "BUSYLOOP", "QUEUE", QUEUE, "STATE", state, "REPLY", "id")
            if not isinstance(reply, list):
                return None
            out.update((job_id.decode(), state) for job_id in reply[1])
        return out
    except (OSError, ConnectionError):
        return None
    finally:
        c.close()


class Session:
    """A connection to one random node at a time: it moves to another one
    after a random number of commands or any error (the node down, stopped
    or slow: ``timeout`` seconds without a reply)."""

    def __init__(self, cluster, rng, timeout):
        self.cluster = cluster
        self.rng = rng
        self.timeout = timeout
        self.client = None
        self.node = None  # index of the node connected to
        self.left = 0

    @staticmethod
    def once(node, *args):
        c = Client(node.port, host=node.host, timeout=5)
        try:
            return c.call(*args)
        finally:
            c.close()

    def call(self, *args):
        if self.client is None or self.left <= 0:
            self.close()
            self.node = self.rng.randrange(len(self.cluster.nodes))
            node = self.cluster.nodes[self.node]
            self.client = Client(node.port, host=node.host, timeout=self.timeout)
            self.left = self.rng.randint(1, 50)
        self.left -= 1
        try:
            self.client.send(Client.encode(*args))
            return self.client.read(timeout=self.timeout)
        except (OSError, ConnectionError):
            self.close()
            raise

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None


class Workload:
    """Producer and consumer threads writing one :class:`History`."""

    def __init__(self, cluster, history, options, tag):
        self.cluster = cluster
        self.history = history
        self.options = options
        self.tag = tag
        self.producing = threading.Event()
        self.consuming = threading.Event()
        self.paused = threading.Event()  # consumers wait while set
        self.producers = [threading.Thread(target=self._produce, args=(k,), daemon=True)
                          for k in range(options.producers)]
        self.consumers = [threading.Thread(target=self._consume, args=(k,), daemon=True)
                          for k in range(options.consumers)]

    def start(self):
        self.producing.set()
        self.consuming.set()
        for t in self.producers + self.consumers:
            t.start()

    def stop_producers(self):
        self.producing.clear()
        for t in self.producers:
            t.join()

    def stop_consumers(self):
        self.paused.clear()
        self.consuming.clear()
        for t in self.consumers:
            t.join()

    def _produce(self, k):
        o = self.options
        session = Session(self.cluster, random.Random("%d/p%d" % (o.seed, k)), ADDJOB_TIMEOUT_MS / 1000.0 + 3)
        interval = o.producers / float(o.rate)
        next_at = time.time()
        seq = 0
        while self.producing.is_set():
            body = "%s:p%d:%d" % (self.tag, k, seq)
            seq += 1
            self.history.attempt(body)
            try:
                reply = session.call("ADDJOB", QUEUE, body, str(ADDJOB_TIMEOUT_MS), "REPLICATE", str(o.replicate),
                                     "RETRY", str(o.retry))
            except (OSError, ConnectionError) as e:
                self.history.error("ADDJOB " + type(e).__name__)
                time.sleep(0.1)
                continue
            if isinstance(reply, bytes) and reply.startswith(b"D-"):
                self.history.ack(reply.decode(), body)
            else:
                self.history.error("ADDJOB " + str(reply).split(" ")[0])
            next_at = max(next_at + interval, time.time() - 1)
            time.sleep(max(0.0, next_at - time.time()))

    def _consume(self, k):
        session = Session(self.cluster, random.Random("%d/c%d" % (self.options.seed, k)), 3.0)
        while self.consuming.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            try:
                reply = session.call("GETJOB", "TIMEOUT", "200", "COUNT", "16", "FROM", QUEUE)
            except (OSError, ConnectionError) as e:
                self.history.error("GETJOB " + type(e).__name__)
                time.sleep(0.1)
                continue
            if isinstance(reply, Exception):
                self.history.error("GETJOB " + str(reply).split(" ")[0])
                time.sleep(0.1)
                continue
            if not reply:
                continue
            jobs = [(job[1].decode(), job[2].decode()) for job in reply]
            if len(set(jobs)) < len(jobs):
                self.history.error("GETJOB the same job twice in one reply")
            self.history.deliver(jobs, session.node, k)
            try:
                reply = session.call("ACKJOB", *[job_id for job_id, _ in jobs])
            except (OSError, ConnectionError) as e:
                self.history.error("ACKJOB " + type(e).__name__)
                continue
            if isinstance(reply, Exception):
                self.history.error("ACKJOB " + str(reply).split(" ")[0])


class Nemesis:
    """Faults of one kind on a schedule drawn from ``rng``; each returns the
    event it records."""

    def __init__(self, kind, cluster, workload, rng, partitioner):
        self.kind = kind
        self.cluster = cluster
        self.workload = workload
        self.rng = rng
        self.partitioner = partitioner
        self.n = len(cluster.nodes)
        self.replicate = workload.options.replicate
        # corrupt: bit flips only where the nodes can start past a damaged record.
        self.damages = ("tail", "middle", "flip") if skip_damaged_directive() else ("tail", "middle")

    def run(self, seconds):
        events = []
        end = time.time() + seconds
        while True:
            gap = self.rng.uniform(2, 5) if self.kind in ("kill-all", "power-cut") else self.rng.uniform(1, 3)
            self._sleep_until(min(end, time.time() + gap))
            if time.time() >= end - 1:
                return events
            hold = self.rng.uniform(2, 8) if self.kind == "partition" else self.rng.uniform(1, 4)
            event = {"at": round(time.time(), 3), "kind": self.kind}
            event.update(getattr(self, self.kind.replace("-", "_"))(min(hold, max(0.5, end - time.time()))))
            events.append(event)

    @staticmethod
    def _sleep_until(t):
        time.sleep(max(0.0, t - time.time()))

    def _victims(self):
        """One node, or as many as the copies of a job survive (REPLICATE - 1)
        while the rest can still replicate new ones."""
        most = max(1, min(self.replicate - 1, self.n - self.replicate))
        return sorted(self.rng.sample(range(self.n), self.rng.randint(1, most)))

    def kill(self, hold):
        victims = self._victims()
        self.cluster.kill(victims)
        time.sleep(hold)
        self.cluster.restart(victims)
        return {"nodes": victims, "hold": round(hold, 2)}

    kill_aof = kill

    def stop(self, hold):
        victims = self._victims()
        self.cluster.pause(victims, signal.SIGSTOP)
        time.sleep(hold)
        self.cluster.pause(victims, signal.SIGCONT)
        return {"nodes": victims, "hold": round(hold, 2)}

    def partition(self, hold):
        order = list(range(self.n))
        self.rng.shuffle(order)
        cut = self.rng.randint(1, self.n // 2)
        side_a, side_b = sorted(order[:cut]), sorted(order[cut:])
        self.partitioner.cut([self.cluster.bus(i) for i in side_a], [self.cluster.bus(i) for i in side_b])
        time.sleep(hold)
        self.partitioner.heal()
        return {"sides": [side_a, side_b], "hold": round(hold, 2)}

    def kill_all(self, hold, power_cut=False):
        """Consumers wait until a backlog builds, then take it (GETJOB,
        ACKJOB) for a moment, and every node is killed at once: jobs queued,
        delivered and not acknowledged yet, acknowledged on one node and not
        yet on the others.  All restart with the AOF -- with ``power_cut``,
        once their files are cut back to what a power cut leaves
        (``faultdisk.power_cut``)."""
        self.workload.paused.set()
        time.sleep(self.rng.uniform(1, 3))
        backlog = self.cluster.backlog()
        window = self.workload.options.take_before_kill
        if window > 0:
            self.workload.paused.clear()
            time.sleep(self.rng.uniform(min(0.1, window), window))
        everyone = list(range(self.n))
        killed_at = time.time()
        self.cluster.kill(everyone)
        self.workload.paused.clear()
        event = {"backlog": backlog, "killed_at": round(killed_at, 3)}
        if power_cut:
            cut_bytes = undone = 0
            for node in self.cluster.nodes:
                done = faultdisk.power_cut(node.datadir, node.synclog)
                cut_bytes += sum(size - keep for size, keep in done["cut"].values())
                undone += len(done["undone"])
            event.update(cut_bytes=cut_bytes, renames_undone=undone)
        time.sleep(self.rng.uniform(0, 1))
        started = time.time()
        self.cluster.restart(everyone)
        event["restart_s"] = round(time.time() - started, 2)
        return event

    def power_cut(self, hold):
        return self.kill_all(hold, power_cut=True)

    def _disk_full(self, victims, hold):
        """Fill the tmpfs of ``victims`` (leaving 0-2 pages: a write may go
        through in part first), free them ``hold`` s later, or later still
        (at most ``FULL_WAIT`` s more) until a client has been refused with
        -MISCONF: on a slow machine the producers may take longer than
        ``hold`` to write past the slack, and a hold that ends first tests
        nothing.  The disks stay full meanwhile: space freed on the way (an
        AOF rewrite finishing renames its file over the old, bigger one) is
        taken again every 50 ms, or the node would write on as if nothing
        had happened."""
        slack = self.rng.randint(0, 2) * 4096
        taken = {}
        history = self.workload.history
        refused = history.misconf_refusals()
        started = time.time()
        try:
            for i in victims:
                taken[i] = faultdisk.fill(self.cluster.nodes[i].datadir, slack)
            deadline = started + hold
            while time.time() < deadline or (
                    history.misconf_refusals() == refused and time.time() < deadline + FULL_WAIT):
                time.sleep(min(0.05, max(deadline - time.time(), 0.01)))
                for i in victims:
                    taken[i] += faultdisk.fill(self.cluster.nodes[i].datadir, slack)
        finally:
            for i in victims:
                faultdisk.free(self.cluster.nodes[i].datadir)
        return {"nodes": victims, "hold": round(time.time() - started, 2), "slack": slack,
                "filled_mb": round(sum(taken.values()) / 1048576.0, 1)}

    def disk_full_one(self, hold):
        return self._disk_full([self.rng.randrange(self.n)], hold)

    def disk_full_all(self, hold):
        return self._disk_full(list(range(self.n)), hold)

    def corrupt(self, hold):
        """kill -9 a minority, damage each one's AOF (a kind drawn from
        ``damages``), restart them after ``hold`` s."""
        victims = self._victims()
        self.cluster.kill(victims)
        kinds = [self.rng.choice(self.damages) for _ in victims]
        damaged = {i: faultdisk.damage(self.cluster.nodes[i].aof, kind, self.rng) for i, kind in zip(victims, kinds)}
        time.sleep(hold)
        self.cluster.restart(victims)
        return {"nodes": victims, "hold": round(hold, 2), "damage": damaged}


def drain(cluster, history, options):
    """Let the consumers run until nothing came for ``--quiet`` s and no
    node holds a job it could still deliver, or ``--drain`` s passed
    (``faultcheck.drain_over``).  Returns (seconds it took, why it ended,
    [(second, jobs held in a live state or None)] of each look at the
    nodes)."""
    start = time.time()
    asked = 0.0
    looks = []
    while True:
        time.sleep(0.25)
        now = time.time()
        silent = now - max(history.last_delivery, start)
        holding = None
        if silent >= options.quiet and now - asked >= 1.0:
            asked = now
            holding = cluster.holding()
            looks.append((round(now - start, 1), holding))
        why = drain_over(time.time() - start, silent, history.missing(), holding, options.quiet, options.drain)
        if why is not None:
            return round(time.time() - start, 1), why, looks


def phase_setup(kind, options):
    """``(report, reason)``: the phase's first fields, and why it cannot run
    here (None: it can)."""
    aof = kind != "kill" and not options.no_aof
    # Nodes that keep their memory, or get it back from the AOF, lose nothing;
    # after a power cut, only what was fsynced is left.
    guarantee = aof or kind in ("stop", "partition")
    if kind == "power-cut":
        guarantee = aof and options.appendfsync == "always"
    report = {"nemesis": kind, "aof": aof and options.appendfsync, "guarantee": guarantee}
    reason = None
    if kind == "partition" and options.no_partition_reason is not None:
        reason = options.no_partition_reason
    elif kind in STORAGE and options.no_aof:
        reason = "a storage nemesis works on the AOF: not run with --no-aof"
    elif kind.startswith("disk-full"):
        reason = options.no_disk_reason
    return report, reason


def run_phase(kind, options, base, partitioner, workdir):
    """One nemesis on a fresh cluster: the phase's report (a dict)."""
    report, reason = phase_setup(kind, options)
    if reason is not None:
        report["skipped"] = reason
        return report
    args = ["--cluster-node-timeout", str(options.node_timeout)]
    if report["aof"]:
        args += ["--appendonly", "yes", "--set", "appendfsync=" + options.appendfsync]
    if kind in STORAGE:  # rewrites (and their renames) happen within a short run too
        args += ["--set", "auto-aof-rewrite-min-size=%d" % options.rewrite_min_size]
    if kind == "corrupt" and skip_damaged_directive():
        args += ["--set", skip_damaged_directive()]
        report["flips"] = True
    elif kind == "corrupt":
        report["flips"] = False  # no directive to load past a damaged record: tail and middle cuts only
    hosts = ["127.0.0.%d" % (base + i) for i in range(options.nodes)]
    disks = faultdisk.Disks() if kind.startswith("disk-full") else None
    cluster = None
    try:
        cluster = Cluster(os.path.join(workdir, kind), hosts, args, data=kind in STORAGE, disks=disks,
                          disk_size=options.disk_size, synclog=kind == "power-cut")
        _run_phase(kind, options, cluster, partitioner, report)
    finally:
        if cluster is not None:
            cluster.kill_all_quietly()
        if disks is not None:
            if options.keep and cluster is not None:  # (the tmpfs goes with the mount)
                for node in cluster.nodes:
                    shutil.copytree(node.datadir, node.datadir + "-kept", ignore=shutil.ignore_patterns("filler"))
            disks.close()
    return report


def _run_phase(kind, options, cluster, partitioner, report):
    history = History()
    workload = Workload(cluster, history, options, "s%d:%s" % (options.seed, kind))
    rng = random.Random("%d/%s" % (options.seed, kind))
    watching = threading.Event()
    watching.set()

    def watch():
        while watching.is_set():
            cluster.watch()
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    workload.start()
    try:
        events = Nemesis(kind, cluster, workload, rng, partitioner).run(options.seconds)
    finally:
        if partitioner is not None:
            partitioner.heal()
        cluster.heal()
    workload.stop_producers()
    try:
        if cluster.dead:  # (a node that could not restart: never meshed again)
            raise AssertionError("nodes %s could not restart" % sorted(cluster.dead))
        wait_full_mesh(cluster.nodes, timeout=60)
        report["meshed_after_heal"] = True
    except AssertionError:
        report["meshed_after_heal"] = False
    before = len(history.deliveries)
    report["drain_s"], report["drain_end"], report["drain_looks"] = drain(cluster, history, options)
    report["drain_deliveries"] = len(history.deliveries) - before
    workload.stop_consumers()
    watching.clear()
    watcher.join()
    cluster.watch()

    undelivered = [job_id for job_id in history.acked if job_id not in history.delivered]
    holdings = cluster.holdings() if undelivered else []
    states = {job_id: [UNKNOWN if h is None else h.get(job_id, "-") for h in holdings] for job_id in undelivered}
    result = check(history.attempted, history.acked, history.deliveries, states)
    twice = [job_id for job_id, times in history.trace.items() if len(times) > 1]
    report["duplicate_trace"] = {job_id: history.trace[job_id] for job_id in twice[:200]}
    report["duplicates_across_kill_all"] = across_kills(
        [history.trace[job_id] for job_id in twice], [e["killed_at"] for e in events if "killed_at" in e])
    report.update(events=events, errors=dict(history.errors), result=result,
                  crashes=cluster.crashes, tracebacks=cluster.tracebacks(),
                  refused=history.misconf_refusals())
    report["where_lost"] = {job_id: states[job_id] for job_id in result["lost"][:10]}
    report["lost_before_kill_s"] = lost_before_kill(
        [history.acked_at[job_id] for job_id in result["lost"]], [e["killed_at"] for e in events if "killed_at" in e])
    cluster.stop()


def lost_before_kill(acked_at, kills):
    """How long before the next kill of every node the lost jobs were
    acknowledged (``[seconds]``, largest first; a job acknowledged after
    the last kill is left out): after a power cut, the window the fsync
    policy let go."""
    ages = []
    for t in acked_at:
        after = [k - t for k in kills if k >= t]
        if after:
            ages.append(round(min(after), 3))
    return sorted(ages, reverse=True)


def across_kills(traces, kills):
    """How many deliveries beyond the first came after a kill of every node
    that followed the job's first delivery: jobs in flight at the kill
    (delivered, their ACK not yet on every copy) given again after the
    restart.  ``traces``: [(time, node, ...)] per job delivered more than
    once."""
    n = 0
    for trace in traces:
        first = trace[0][0]
        n += sum(1 for t in (entry[0] for entry in trace[1:]) if any(first <= k < t for k in kills))
    return n


def verdict(phase):
    """The phase's failures, as sentences (empty: passed)."""
    if "skipped" in phase:
        return []
    r = phase["result"]
    out = []
    if phase["guarantee"] and r["lost"]:
        out.append("%d acknowledged jobs lost" % len(r["lost"]))
    if r.get("held"):
        out.append("%d acknowledged jobs still held by the nodes, not delivered, when the drain ended (%s)" % (
            len(r["held"]), phase.get("drain_end", "?")))
    if r["unexpected"]:
        out.append("%d unexpected deliveries" % len(r["unexpected"]))
    if phase["crashes"]:
        out.append("%d node crashes" % len(phase["crashes"]))
    if phase["tracebacks"]:
        out.append("tracebacks in node logs %s" % phase["tracebacks"])
    return out


def print_report(report, out=sys.stdout):
    w = out.write
    w("\nseed %(seed)d, %(nodes)d nodes, REPLICATE %(replicate)d RETRY %(retry)d, appendfsync %(appendfsync)s, "
      "%(seconds)ss per nemesis\n\n" % report["options"])
    w("%-13s %-9s %6s %8s %9s %6s %6s %10s %7s %8s %7s  %s\n" % (
        "nemesis", "aof", "events", "acked", "delivered", "lost", "held", "unexpected", "dup %", "refused",
        "crashes", "verdict"))
    for phase in report["phases"]:
        if "skipped" in phase:
            w("%-13s skipped: %s\n" % (phase["nemesis"], phase["skipped"]))
            continue
        r = phase["result"]
        bad = verdict(phase)
        note = "; ".join(bad) if bad else "ok"
        if not phase["guarantee"]:
            note += " (lost jobs allowed: %s)" % (
                "no AOF" if not phase["aof"] else "power cut with appendfsync %s" % phase["aof"])
        w("%-13s %-9s %6d %8d %9d %6d %6d %10d %7.3f %8d %7d  %s\n" % (
            phase["nemesis"], phase["aof"] or "off", len(phase["events"]), r["acked"], r["delivered"],
            len(r["lost"]), len(r.get("held", ())), len(r["unexpected"]), r["duplicate_pct"],
            phase.get("refused", 0), len(phase["crashes"]), note))
    for phase in report["phases"]:
        if "skipped" in phase:
            continue
        r = phase["result"]
        w("\n%s: %d deliveries, %d duplicates (jobs delivered n times: %s), %d delivered unconfirmed, "
          "drain %ss (%s)%s\n" % (phase["nemesis"], r["deliveries"], r["duplicates"], r["redelivered"] or "-",
                                  r["unconfirmed"], phase["drain_s"], phase["drain_end"],
                                  "" if phase["meshed_after_heal"] else ", NOT meshed after heal"))
        if phase.get("flips") is False:
            w("  no bit flips: this version has no directive to load an AOF past a damaged record\n")
        if phase["nemesis"] in ("kill-all", "power-cut"):
            w("  duplicates of jobs delivered before a kill and again after it: %d of %d\n" % (
                phase["duplicates_across_kill_all"], r["duplicates"]))
            if phase["lost_before_kill_s"]:
                w("  lost jobs were acknowledged %.3f-%.3f s before a kill\n" % (
                    phase["lost_before_kill_s"][-1], phase["lost_before_kill_s"][0]))
        w("  errors seen by clients: %s\n" % (phase["errors"] or "-"))
        w("  events: %s\n" % "; ".join(_event(e) for e in phase["events"]))
        for job_id, states in phase["where_lost"].items():
            w("  lost %s: state per node %s\n" % (job_id, states))
        for job_id, states in sorted(r.get("held", {}).items())[:10]:
            w("  held %s: state per node %s\n" % (job_id, states))
        for job_id, body in r["unexpected"][:10]:
            w("  unexpected delivery %s %r\n" % (job_id, body))
        for crash in phase["crashes"]:
            w("  %s of node %d (exit %s):\n%s\n" % ("failed restart" if crash.get("restart_failed") else "crash",
                                                  crash["node"], crash["returncode"], crash["log_tail"]))


def _event(e):
    return ", ".join("%s %s" % (k, v) for k, v in e.items() if k not in ("at", "kind", "killed_at"))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--seconds", type=float, default=60, help="of faults, per nemesis")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nemesis", default=",".join(NEMESES), help="comma-separated, of: " + ", ".join(NEMESES))
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="always")
    p.add_argument("--replicate", type=int, default=3)
    p.add_argument("--retry", type=int, default=1)
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--rate", type=float, default=200, help="jobs added per second, all producers (at most)")
    p.add_argument("--node-timeout", type=int, default=2000, help="cluster-node-timeout, ms")
    p.add_argument("--quiet", type=float, default=5,
                   help="drain: ends once nothing came for this many seconds and no node holds a job it could "
                        "still deliver")
    p.add_argument("--drain", type=float, default=180,
                   help="drain: at most this many seconds (acknowledged jobs still held then are reported held)")
    p.add_argument("--disk-size", type=int, default=32 << 20,
                   help="disk-full-*: bytes of each node's tmpfs")
    p.add_argument("--rewrite-min-size", type=int, default=256 << 10,
                   help="storage nemeses: auto-aof-rewrite-min-size of the nodes, bytes (rewrites, and their "
                        "renames, within a short run)")
    p.add_argument("--take-before-kill", type=float, default=0.6,
                   help="kill-all: the consumers take the backlog for up to this many seconds (at least 0.1) "
                        "before every node is killed; 0: killed while they still wait, the whole backlog queued")
    p.add_argument("--no-aof", action="store_true",
                   help="no AOF in any phase: kill-aof is kill, and kill-all loses its backlog (reported, allowed)")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--keep", action="store_true", help="keep the nodes' directories (logs, AOFs)")
    o = p.parse_args(argv)
    kinds = o.nemesis.split(",")
    unknown = [k for k in kinds if k not in NEMESES]
    if unknown:
        p.error("unknown nemesis %s (of %s)" % (", ".join(unknown), ", ".join(NEMESES)))
    if not 1 <= o.nodes <= 10:
        p.error("--nodes must be 1..10")
    o.kinds = kinds
    o.no_partition_reason = o.no_disk_reason = None
    return o


def main(argv=None):
    options = parse_args(argv)
    base = 100 + (os.getpid() % 10) * 10  # 127.0.0.100-199: apart from other tests
    workdir = tempfile.mkdtemp(prefix="disque-faults-")
    partitioner = None
    if any(kind.startswith("disk-full") for kind in options.kinds) and not options.no_aof:
        options.no_disk_reason = faultdisk.unavailable()
    if "partition" in options.kinds:
        options.no_partition_reason = netfilter.unavailable()
        if options.no_partition_reason is None:
            partitioner = netfilter.Partitioner().__enter__()
    report = {"options": {k: v for k, v in vars(options).items() if k != "kinds"}, "workdir": workdir,
              "chain": partitioner and partitioner.chain, "phases": []}
    try:
        for kind in options.kinds:
            print("== %s (%ss) ..." % (kind, options.seconds), flush=True)
            report["phases"].append(run_phase(kind, options, base, partitioner, workdir))
    finally:
        if partitioner is not None:
            partitioner.close()
        if not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print_report(report)
    if options.json:
        with open(options.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    failed = [(p["nemesis"], verdict(p)) for p in report["phases"] if verdict(p)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
