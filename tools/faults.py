"""The fault-injection suite: a randomised workload against a real local
cluster, a nemesis, and a checker of what the clients saw.

    python tools/faults.py --nodes 5 --seconds 60 --seed 1 \\
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
               (iptables, see ``tools/netfilter.py``), then heal; skipped
               with the reason when rules cannot be set here;
``kill-all``   pause the consumers until a backlog builds, resume them
               and, while they take it (``--take-before-kill``), kill -9
               every node at once; restart them all with the AOF.

Then everything is healed, the producers stop and the consumers drain
until every acknowledged job was delivered and nothing came for
``--quiet`` seconds (or nothing came for ``--idle`` seconds, or
``--drain`` seconds passed).  ``tools/faultcheck.py`` gives the verdict:
lost, unexpected, duplicate %, and crashes (a node process that exited
without the nemesis killing it, or a Traceback in a node's log).  Every
delivery's time, node and consumer are traced: for ``kill-all`` the
report counts apart the duplicates of jobs delivered before a kill of
every node and again after it (ACKs in flight at the kill), and
``--json`` keeps the traces of up to 200 duplicated jobs.

Exit status 1 when a phase lost an acknowledged job where the guarantee
holds (every nemesis except ``kill``, and every one with ``--no-aof`` but
``stop`` and ``partition``: a node restarted without its AOF has forgotten
its copies), delivered an unexpected job, or saw a crash; 0 otherwise.  ``--json FILE`` writes the whole report.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from faultcheck import check  # noqa: E402
import netfilter  # noqa: E402
from support import Client, show, start_cluster, wait_full_mesh  # noqa: E402

NEMESES = ("kill", "kill-aof", "stop", "partition", "kill-all")
QUEUE = "faults"
BUS_PORT_OFFSET = 10000
ADDJOB_TIMEOUT_MS = 2000


class History:
    """What the clients saw, shared by the workload's threads (one lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.attempted = set()
        self.acked = {}
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

    def missing(self):
        """How many acknowledged jobs were not delivered yet."""
        with self.lock:
            return sum(1 for job_id in self.acked if job_id not in self.delivered)


class Cluster:
    """The nodes of one phase, what the nemesis did to them, and the crashes
    it did not cause (found by :meth:`watch`)."""

    def __init__(self, workdir, hosts, args):
        self.nodes = start_cluster(workdir, len(hosts), args=args, hosts=hosts, timeout=60)
        self.down = set()      # killed by the nemesis, not restarted yet
        self.stopped = set()   # SIGSTOPped
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
        for i in indexes:
            node = self.nodes[i]
            node.proc.stdout.close()
            node.start(wait=False)
        for i in indexes:
            self.nodes[i].wait_ready(timeout=120)
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
        self.restart(sorted(self.down))

    def watch(self):
        """Record nodes that exited on their own; they stay down until
        :meth:`heal` (restarts happen on the main thread: a node dies with
        the thread that started it, PR_SET_PDEATHSIG)."""
        with self.lock:
            for i, node in enumerate(self.nodes):
                if i in self.down or node.proc.poll() is None:
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

    def stop(self):
        self.heal()
        with self.lock:
            self.down.update(range(len(self.nodes)))
        for node in self.nodes:
            node.stop()
            node.proc.stdout.close()


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
                session.call("ACKJOB", *[job_id for job_id, _ in jobs])
            except (OSError, ConnectionError) as e:
                self.history.error("ACKJOB " + type(e).__name__)


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

    def run(self, seconds):
        events = []
        end = time.time() + seconds
        while True:
            gap = self.rng.uniform(2, 5) if self.kind == "kill-all" else self.rng.uniform(1, 3)
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

    def kill_all(self, hold):
        """Consumers wait until a backlog builds, then take it (GETJOB,
        ACKJOB) for a moment, and every node is killed at once: jobs queued,
        delivered and not acknowledged yet, acknowledged on one node and not
        yet on the others.  All restart with the AOF."""
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
        time.sleep(self.rng.uniform(0, 1))
        started = time.time()
        self.cluster.restart(everyone)
        return {"backlog": backlog, "killed_at": round(killed_at, 3), "restart_s": round(time.time() - started, 2)}


def drain(history, options):
    """Let the consumers run until every acknowledged job was delivered and
    nothing came for ``--quiet`` s, nothing came for ``--idle`` s, or
    ``--drain`` s passed.  Returns the seconds it took."""
    start = time.time()
    while True:
        time.sleep(0.25)
        now = time.time()
        silent = now - max(history.last_delivery, start)
        if silent >= options.quiet and history.missing() == 0:
            break
        if silent >= options.idle or now - start >= options.drain:
            break
    return round(time.time() - start, 1)


def run_phase(kind, options, base, partitioner, workdir):
    """One nemesis on a fresh cluster: the phase's report (a dict)."""
    aof = kind != "kill" and not options.no_aof
    # Nodes that keep their memory, or get it back from the AOF, lose nothing.
    report = {"nemesis": kind, "aof": aof and options.appendfsync,
              "guarantee": aof or kind in ("stop", "partition")}
    if kind == "partition" and partitioner is None:
        report["skipped"] = options.no_partition_reason
        return report
    args = ["--cluster-node-timeout", str(options.node_timeout)]
    if aof:
        args += ["--appendonly", "yes", "--set", "appendfsync=" + options.appendfsync]
    hosts = ["127.0.0.%d" % (base + i) for i in range(options.nodes)]
    cluster = Cluster(os.path.join(workdir, kind), hosts, args)
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
        wait_full_mesh(cluster.nodes, timeout=60)
        report["meshed_after_heal"] = True
    except AssertionError:
        report["meshed_after_heal"] = False
    report["drain_s"] = drain(history, options)
    workload.stop_consumers()
    watching.clear()
    watcher.join()
    cluster.watch()

    result = check(history.attempted, history.acked, history.deliveries)
    twice = [job_id for job_id, times in history.trace.items() if len(times) > 1]
    report["duplicate_trace"] = {job_id: history.trace[job_id] for job_id in twice[:200]}
    report["duplicates_across_kill_all"] = across_kills(
        [history.trace[job_id] for job_id in twice], [e["killed_at"] for e in events if "killed_at" in e])
    report.update(events=events, errors=dict(history.errors), result=result,
                  crashes=cluster.crashes, tracebacks=cluster.tracebacks())
    report["where_lost"] = {job_id: [_state(node, job_id) for node in cluster.nodes]
                            for job_id in result["lost"][:10]}
    cluster.stop()
    return report


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


def _state(node, job_id):
    try:
        job = show(node, job_id)
    except (OSError, ConnectionError):
        return "?"
    return "-" if job is None else job[b"state"].decode()


def verdict(phase):
    """The phase's failures, as sentences (empty: passed)."""
    if "skipped" in phase:
        return []
    r = phase["result"]
    out = []
    if phase["guarantee"] and r["lost"]:
        out.append("%d acknowledged jobs lost" % len(r["lost"]))
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
    w("%-10s %-9s %6s %8s %9s %6s %10s %7s %7s  %s\n" % (
        "nemesis", "aof", "events", "acked", "delivered", "lost", "unexpected", "dup %", "crashes", "verdict"))
    for phase in report["phases"]:
        if "skipped" in phase:
            w("%-10s skipped: %s\n" % (phase["nemesis"], phase["skipped"]))
            continue
        r = phase["result"]
        bad = verdict(phase)
        note = "; ".join(bad) if bad else "ok"
        if not phase["guarantee"]:
            note += " (lost jobs allowed: no AOF)"
        w("%-10s %-9s %6d %8d %9d %6d %10d %7.3f %7d  %s\n" % (
            phase["nemesis"], phase["aof"] or "off", len(phase["events"]), r["acked"], r["delivered"],
            len(r["lost"]), len(r["unexpected"]), r["duplicate_pct"], len(phase["crashes"]), note))
    for phase in report["phases"]:
        if "skipped" in phase:
            continue
        r = phase["result"]
        w("\n%s: %d deliveries, %d duplicates (jobs delivered n times: %s), %d delivered unconfirmed, "
          "drain %ss%s\n" % (phase["nemesis"], r["deliveries"], r["duplicates"], r["redelivered"] or "-",
                             r["unconfirmed"], phase["drain_s"],
                             "" if phase["meshed_after_heal"] else ", NOT meshed after heal"))
        if phase["nemesis"] == "kill-all":
            w("  duplicates of jobs delivered before a kill and again after it: %d of %d\n" % (
                phase["duplicates_across_kill_all"], r["duplicates"]))
        w("  errors seen by clients: %s\n" % (phase["errors"] or "-"))
        w("  events: %s\n" % "; ".join(_event(e) for e in phase["events"]))
        for job_id, states in phase["where_lost"].items():
            w("  lost %s: state per node %s\n" % (job_id, states))
        for job_id, body in r["unexpected"][:10]:
            w("  unexpected delivery %s %r\n" % (job_id, body))
        for crash in phase["crashes"]:
            w("  crash of node %(node)d (exit %(returncode)s):\n%(log_tail)s\n" % crash)


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
    p.add_argument("--quiet", type=float, default=5, help="drain: seconds without a delivery once all came")
    p.add_argument("--idle", type=float, default=30, help="drain: seconds without a delivery, give up")
    p.add_argument("--drain", type=float, default=180, help="drain: at most this many seconds")
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
    return o


def main(argv=None):
    options = parse_args(argv)
    base = 100 + (os.getpid() % 10) * 10  # 127.0.0.100-199: apart from other tests
    workdir = tempfile.mkdtemp(prefix="disque-faults-")
    partitioner = None
    options.no_partition_reason = None
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
