"""Schedules under faults: one schedule firing every ``--every`` ms on a real
local cluster while a nemesis kills -9, pauses and restarts nodes, and a
check that each run was added once.

    python -m tests.tools.schedsoak --nodes 3 --seconds 600 --seed 1

Run it with the Python of a virtualenv that has the project and its test
extras installed (the nodes are that environment's ``twistd -n disque``).

Node i listens on 127.0.0.<base+i> (``tests/tools/faults.py``'s cluster,
with the AOF on, ``appendfsync always`` unless ``--appendfsync`` says).  Node 0 gets ``SCHEDULE ADD
soak sched tick EVERY <every> RETRY <retry>``; a consumer takes every job
of ``sched`` from every node it can reach (GETJOB, then ACKJOB at once)
and records each delivery.  Each run's job ID is derived from (schedule,
version, fire time) (``disque.core.recurring.run_id``), so every delivery
names its run.  For ``--seconds`` the nemesis, on a schedule drawn from
``--seed``, kills -9 one node (restarted 1-5 s later), SIGSTOPs one
(SIGCONT 1-5 s later), or both at once, never every node: at least one is
always up.  Then every node is healed, the schedule is deleted, and the
consumer drains until every run owed was delivered or ``--drain`` seconds
passed.

The verdict: ``missing`` (runs due while a node was up, never delivered),
``doubled`` (runs delivered again after an acknowledged delivery, with
each delivery's node and time; a run delivered again because the ACK of
its delivery got no answer, its node killed or paused first, is listed
apart: at least once, as every job), ``unknown`` (deliveries of no run of the schedule), crashes and
tracebacks.  Exit status 1 if any of them is not empty.  ``--json FILE``
writes the report.
"""

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time

from disque.core.recurring import run_id
from tests.support.process import Client, call, wait_for
from tests.tools.faults import Cluster

NAME = b"soak"
QUEUE = b"sched"
TTL = 3600


def show(node) -> dict:
    reply = call(node, "SCHEDULE", "SHOW", NAME)
    return dict(zip(reply[::2], reply[1::2]))


class Consumer(threading.Thread):
    """Takes every job of the queue from every node it can reach."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.deliveries = []  # (job id, node index, time)
        self.acked = set()  # indexes in deliveries whose ACKJOB was answered
        self.errors = {}
        self.running = True

    def run(self):
        clients = {}
        while self.running:
            for i, node in enumerate(self.cluster.nodes):
                with self.cluster.lock:
                    usable = i not in self.cluster.down and i not in self.cluster.stopped
                if not usable:
                    old = clients.pop(i, None)
                    if old is not None:
                        old.close()
                    continue
                try:
                    c = clients.get(i)
                    if c is None:
                        c = clients[i] = Client(node.port, host=node.host, timeout=3)
                    got = c.call("GETJOB", "TIMEOUT", "100", "COUNT", "10", "FROM", QUEUE) or []
                    first = len(self.deliveries)
                    for _, job_id, _ in got:
                        self.deliveries.append((job_id, i, time.time()))
                    if got:
                        if isinstance(c.call("ACKJOB", *[j[1] for j in got]), int):
                            self.acked.update(range(first, len(self.deliveries)))
                except (OSError, ConnectionError, ValueError) as e:
                    self.errors[type(e).__name__] = self.errors.get(type(e).__name__, 0) + 1
                    old = clients.pop(i, None)
                    if old is not None:
                        old.close()


def nemesis(cluster, rng, seconds, events):
    """Faults for ``seconds``: each a kill -9, a pause, or both on two nodes."""
    n = len(cluster.nodes)
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(rng.uniform(1.0, 4.0))
        kind = rng.choice(["kill", "stop", "both"] if n >= 3 else ["kill", "stop"])
        picked = rng.sample(range(n), 2 if kind == "both" else 1)
        hold = rng.uniform(1.0, 5.0)
        events.append({"at": time.time(), "kind": kind, "nodes": picked, "hold": round(hold, 2)})
        if kind in ("kill", "both"):
            cluster.kill(picked[:1])
        if kind in ("stop", "both"):
            cluster.pause(picked[-1:], signal.SIGSTOP)
        time.sleep(hold)
        cluster.watch()
        cluster.heal()


def run(options) -> dict:
    rng = random.Random(options.seed)
    workdir = tempfile.mkdtemp(prefix="schedsoak-")
    base = 100 + (os.getpid() % 10) * 10 + 5
    hosts = ["127.0.0.%d" % (base + i) for i in range(options.nodes)]
    args = ["--cluster-node-timeout", str(options.node_timeout)]
    if not options.no_aof:
        args += ["--appendonly", "yes", "--set", "appendfsync=" + options.appendfsync]
    cluster = Cluster(workdir, hosts, args)
    events = []
    try:
        assert call(cluster.nodes[0], "SCHEDULE", "ADD", NAME, QUEUE, "tick", "EVERY", str(options.every),
                    "RETRY", str(options.retry), "TTL", str(TTL)) == b"OK"
        shown = show(cluster.nodes[0])
        version, first = shown[b"version"], shown[b"next"][0]
        consumer = Consumer(cluster)
        consumer.start()
        nemesis(cluster, rng, options.seconds, events)
        cluster.heal()
        wait_for(lambda: all(NAME in call(node, "SCHEDULE", "LIST") for node in cluster.nodes), timeout=30,
                 what="every node knowing the schedule after the heal")
        # Deleted on a live node; the last run owed is one due before every
        # node's turn for it has passed.
        assert call(cluster.nodes[0], "SCHEDULE", "DEL", NAME) == 1
        deleted = int(time.time() * 1000)
        last = deleted - 1000 * (options.nodes + 1)
        owed = list(range(first, last + 1, options.every))
        ids = {run_id(NAME, version, t, TTL, options.retry): t for t in range(first, deleted + 1, options.every)}
        deadline = time.time() + options.drain
        while time.time() < deadline:
            delivered = {ids.get(d[0]) for d in consumer.deliveries}
            if all(t in delivered for t in owed):
                break
            time.sleep(0.5)
        time.sleep(1.0)  # late duplicates, if any, land now
        consumer.running = False
        consumer.join(10)
        cluster.watch()
        by_run = {}
        unknown = []
        for k, (job_id, node, at) in enumerate(consumer.deliveries):
            t = ids.get(job_id)
            if t is None:
                unknown.append(job_id.decode())
            else:
                by_run.setdefault(t, []).append({"node": node, "at": round(at, 3), "id": job_id.decode(),
                                                 "acked": k in consumer.acked})
        missing = [t for t in owed if t not in by_run]
        # A delivery whose ACKJOB got no answer (its node died or paused
        # first) is delivered again after its RETRY: at least once, as
        # every job.  A run is doubled if it was delivered again after an
        # ACK its node answered.
        doubled = {str(t): d for t, d in by_run.items() if any(x["acked"] for x in d[:-1])}
        redelivered = {str(t): d for t, d in by_run.items() if len(d) > 1 and str(t) not in doubled}
        where = {}  # for each missing run: what each node holds of its job
        job_of = {t: i for i, t in ids.items()}
        for t in missing:
            where[str(t)] = {}
            for i, node in enumerate(cluster.nodes):
                try:
                    shown = call(node, "SHOW", job_of[t])
                    where[str(t)][i] = None if shown is None else dict(zip(shown[::2], shown[1::2])).get(b"state")
                except (OSError, ConnectionError) as e:
                    where[str(t)][i] = "error: %s" % e
        notices = [line for node in cluster.nodes for line in node.log().splitlines() if "Schedule " in line or "flagged" in line or "reachable again" in line]
        report = {
            "seconds": options.seconds, "every_ms": options.every, "nodes": options.nodes, "seed": options.seed,
            "runs_owed": len(owed), "runs_delivered": len(by_run), "deliveries": len(consumer.deliveries),
            "missing": missing, "missing_held": where, "notices": notices,
            "doubled": doubled, "redelivered_after_a_lost_ack": redelivered,
            "unknown": unknown, "events": events, "consumer_errors": consumer.errors,
            "crashes": cluster.crashes, "tracebacks": cluster.tracebacks(),
        }
    finally:
        cluster.stop()
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--seconds", type=float, default=600, help="of faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--every", type=int, default=1000, help="the schedule's interval, ms")
    p.add_argument("--retry", type=int, default=5, help="RETRY of the runs' jobs, s")
    p.add_argument("--node-timeout", type=int, default=2000, help="cluster-node-timeout, ms")
    p.add_argument("--drain", type=float, default=60, help="seconds to wait for the runs owed, at most")
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="always",
                   help="kill -9 loses nothing under any policy (a record is written before its reply); "
                   "they differ on power cuts, which this tool does not make")
    p.add_argument("--no-aof", action="store_true", help="nodes restart empty: they learn the schedule "
                   "and its progress from the others")
    p.add_argument("--json", help="write the report here")
    options = p.parse_args(argv)
    report = run(options)
    failed = report["missing"] or report["doubled"] or report["unknown"] or report["crashes"] \
        or report["tracebacks"]
    summary = {k: report[k] for k in ("runs_owed", "runs_delivered", "deliveries", "missing", "unknown",
                                      "crashes", "tracebacks")}
    summary["doubled"] = sorted(report["doubled"])
    summary["redelivered_after_a_lost_ack"] = sorted(report["redelivered_after_a_lost_ack"])
    summary["faults"] = len(report["events"])
    print(json.dumps(summary, indent=1))
    if options.json:
        with open(options.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
