"""Compare nodes of several builds side by side, in one run.

Usage::

    .venv/bin/python benchmarks/compare.py TWISTD [TWISTD ...] [--requests 100000]
        [--rounds 3] [--pipeline 16] [--rows ping,addjob,...] [--cluster | --cluster-only]
        [--body-size 4096 ...] [--aof] [--skip-basic]

Each TWISTD is the ``twistd`` of a virtualenv holding one build, or
``TWISTD=CHECKOUT`` to run that virtualenv's interpreter on the code of
another checkout (``git worktree add /tmp/old <rev>``; the checkout goes
first on the node's ``PYTHONPATH``, no second install needed), or another
runtime (``.venv-pypy/bin/twistd``), or the original server's binary
(``../shared/bin/disque-server-1.0rc1``, see ``original.py``).  A node of each build runs at once;
PING and ADDJOB rounds alternate between them, so a noisy neighbour hits
every build alike, and the median of the rounds is printed with the node
CPU time per request, and the ratio of the rate to the original's when one
of the builds is the original.  ``--pipeline 16`` adds ADDJOB -P 16 (four
times ``--requests``); ``--rows`` picks among the single-node rows
(``ROWS``: PING, ADDJOB, ADDJOB -P N, GETJOB NOHANG on a filled queue, and
``run.py``'s ADDJOB + GETJOB + ACKJOB cycle from one pipelined client, per
job).  Every node is emptied (``DEBUG FLUSHALL``) before each measured
ADDJOB row, so a row measures the same table sizes on every build.
``--cluster`` adds a 3-node REPLICATE 3 cluster per
build (unpipelined and -P 16), all running at once, their rounds
alternating too; it prints the CPU of the node the clients talk to and of
the whole cluster, per request.

``--body-size N`` (repeatable) adds ADDJOB and GETJOB NOHANG of N-byte
bodies from ``--body-clients`` (20) clients; before each GETJOB run the
queue is filled with pipelined ADDJOBs outside the measurement, as many
jobs as the run takes and a margin, so no GETJOB finds it empty, and after
each run the node is emptied (DEBUG FLUSHALL): a node holds one run's jobs
at most.  ``--aof`` adds ADDJOB of 100-byte bodies, unpipelined and -P 16,
on a second node per build with ``appendonly yes`` and ``appendfsync
everysec`` (the original takes the same options).  With the original among
the builds, each row also gives every build's rate and CPU per request as
a ratio to the original's.
"""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the root: tests.support
sys.path.insert(0, HERE)

from original import OriginalProcess, is_original, start_original_cluster  # noqa: E402
from run import cpu_seconds, cycle, measured, redis_benchmark  # noqa: E402
from tests.support.process import Client, NodeProcess, start_cluster  # noqa: E402

BODY = "x" * 100
#: The single-node rows: name -> (label, command, requests x --requests);
#: "addjob_p" is ADDJOB at --pipeline, "cycle" is run.py's cycle.
ROWS = {
    "ping": ("PING", ("PING",), 1),
    "addjob": ("ADDJOB", ("ADDJOB", "q", BODY, "0"), 1),
    "addjob_p": ("ADDJOB -P %d", ("ADDJOB", "qp", BODY, "0"), 4),
    "getjob": ("GETJOB NOHANG", ("GETJOB", "NOHANG", "FROM", "gq"), 1),
    "cycle": ("add+get+ack cycle, 1 pipelined client, per job", None, 1),
}
DEFAULT_ROWS = "ping,addjob"
AOF_ARGS = ("--appendonly", "yes", "--appendfsync", "everysec")  # the original's; ours below
OUR_AOF_ARGS = ("--appendonly", "yes", "--set", "appendfsync=everysec")
BODY_BYTES = 512 << 20  # what one body row's run may hold in a node at most


def build(spec):
    """(twistd, environment) of a TWISTD[=CHECKOUT] argument."""
    twistd, _, checkout = spec.partition("=")
    return os.path.abspath(twistd), ({"PYTHONPATH": os.path.abspath(checkout)} if checkout else None)


def start_node(path, aof=False):
    """A started node of the build ``path`` (``aof``: appendonly yes, everysec)."""
    workdir = tempfile.mkdtemp(prefix="disque-compare-")
    if is_original(path):
        return OriginalProcess(workdir, os.path.abspath(path), args=AOF_ARGS if aof else ()).start()
    twistd, env = build(path)
    return NodeProcess(workdir, twistd=twistd, env=env, args=OUR_AOF_ARGS if aof else ()).start()


def start_build_cluster(path, n=3):
    """``n`` started nodes of the build ``path`` in a full mesh."""
    workdir = tempfile.mkdtemp(prefix="disque-compare-")
    if is_original(path):
        return start_original_cluster(workdir, n, os.path.abspath(path))
    twistd, env = build(path)
    return start_cluster(workdir, n, twistd=twistd, env=env)


def flushall(node):
    c = Client(node.port, timeout=60)
    c.call("DEBUG", "FLUSHALL")
    c.close()


def run_row(node, name, n, pipeline):
    """(ops/s, node CPU us per op) of one row on ``node``."""
    label, command, _ = ROWS[name]
    if name in ("addjob", "addjob_p", "cycle"):
        flushall(node)
    if name == "getjob":
        fill(node.port, "gq", n)
    if name == "cycle":
        before = cpu_seconds(node.proc.pid)
        rate = cycle(node.port, n)
        return rate, (cpu_seconds(node.proc.pid) - before) / n * 1e6
    rps, _, cpu = measured(node, n, *command, pipeline=pipeline if name == "addjob_p" else 1)
    return rps, cpu


def single(paths, n, rounds, warmup, names=DEFAULT_ROWS.split(","), pipeline=16):
    nodes = [start_node(p) for p in paths]
    try:
        for node in nodes:
            for name in names:
                run_row(node, name, warmup, pipeline)
        runs = {(i, name): [] for i in range(len(nodes)) for name in names}
        for _ in range(rounds):
            for name in names:
                for i, node in enumerate(nodes):
                    runs[(i, name)].append(run_row(node, name, n * ROWS[name][2], pipeline))
        original = next((i for i, p in enumerate(paths) if is_original(p)), None)
        print("| command | build | ops/s | x original | node CPU us/op |\n|---|---|---:|---:|---:|")
        for name in names:
            label = ROWS[name][0] % pipeline if "%" in ROWS[name][0] else ROWS[name][0]
            rates = [statistics.median(x[0] for x in runs[(i, name)]) for i in range(len(paths))]
            for i, path in enumerate(paths):
                ratio = "%.2f" % (rates[i] / rates[original]) if original is not None else "-"
                print("| %s | %s | %.0f | %s | %.1f |" % (label, path, rates[i], ratio,
                                                         statistics.median(x[1] for x in runs[(i, name)])))
    finally:
        for node in nodes:
            node.stop()


SHAPES = {"unpipelined": 1, "P16": 16}  # the 3-node rows: name -> redis-benchmark -P


def cluster(paths, n, rounds, warmup, names=tuple(SHAPES), pin=False):
    shapes = [("-P 16" if name == "P16" else name, SHAPES[name]) for name in names]
    clusters = []
    try:
        for path in paths:
            clusters.append(start_build_cluster(path))
        if pin:  # the first node alone on CPU 0; the replicas and the load generator on the others
            others = os.sched_getaffinity(0) - {0}
            os.sched_setaffinity(0, others)
            for nodes in clusters:
                os.sched_setaffinity(nodes[0].proc.pid, {0})
                for node in nodes[1:]:
                    os.sched_setaffinity(node.proc.pid, others)
        for nodes in clusters:
            measured(nodes[0], warmup, "ADDJOB", "w", "x" * 100, "0")
        runs = {(i, label): [] for i in range(len(paths)) for label, _ in shapes}
        for _ in range(rounds):
            for label, pipeline in shapes:
                for i, nodes in enumerate(clusters):
                    before = sum(cpu_seconds(node.proc.pid) for node in nodes)
                    rps, p50, cpu = measured(nodes[0], n, "ADDJOB", "q", "x" * 100, "0", pipeline=pipeline)
                    total = (sum(cpu_seconds(node.proc.pid) for node in nodes) - before) / n * 1e6
                    runs[(i, label)].append((rps, p50, cpu, total))
        print("\n| 3-node REPLICATE 3 | build | ops/s | p50 ms | first node CPU us/op | cluster CPU us/op |\n"
              "|---|---|---:|---:|---:|---:|")
        for label, _ in shapes:
            for i, path in enumerate(paths):
                r = runs[(i, label)]
                print("| %s | %s | %.0f | %.2f | %.1f | %.1f |" % (
                    label, path, *(statistics.median(x[k] for x in r) for k in range(4))))
    finally:
        for nodes in clusters:
            for node in nodes:
                node.stop()


def fill(port, queue, n, body=BODY):
    """``n`` jobs of ``body`` in ``queue``, by pipelined ADDJOBs of about
    4 MB at a time (outside any measurement)."""
    c = Client(port, timeout=300)
    cmd = Client.encode("ADDJOB", queue, body, "0")
    batch = max(1, (4 << 20) // len(cmd))
    done = 0
    while done < n:
        k = min(batch, n - done)
        c.send(cmd * k)
        for _ in range(k):
            c.read(timeout=300)
        done += k
    c.close()


def flush(port):
    c = Client(port, timeout=300)
    assert c.call("DEBUG", "FLUSHALL") == b"OK"
    c.close()


class Row:
    """One measured row: ``command`` from ``clients`` clients (-P
    ``pipeline``), ``n`` requests a run; ``body`` set: GETJOB, the queue
    filled with n jobs of that body first; every run ends with the node
    emptied when ``flush``."""

    def __init__(self, label, command, n, clients, pipeline=1, aof=False, fill_body=None, flush=False):
        self.label, self.command, self.n, self.clients = label, command, n, clients
        self.pipeline, self.aof, self.fill_body, self.flush = pipeline, aof, fill_body, flush

    def run(self, node, n):
        if self.fill_body is not None:
            fill(node.port, self.command[-1], n + 2 * self.clients * self.pipeline, self.fill_body)
        before = cpu_seconds(node.proc.pid)
        rps, _ = redis_benchmark(node.port, self.clients, n, *self.command, pipeline=self.pipeline)
        cpu = (cpu_seconds(node.proc.pid) - before) / n * 1e6
        if self.flush:
            flush(node.port)
        return rps, cpu


def body_rows(sizes, requests, clients):
    rows = []
    for size in sizes:
        n = max(2000, min(requests, BODY_BYTES // size))
        body = "x" * size
        rows.append(Row("ADDJOB %d-byte body, %d clients" % (size, clients), ("ADDJOB", "bq", body, "0"),
                        n, clients, flush=True))
        rows.append(Row("GETJOB NOHANG %d-byte body, %d clients" % (size, clients),
                        ("GETJOB", "NOHANG", "FROM", "bq"), n, clients, fill_body=body, flush=True))
    return rows


def aof_rows(requests, clients):
    return [Row("ADDJOB appendonly everysec, %d clients" % clients, ("ADDJOB", "aq", "x" * 100, "0"),
                requests, clients, aof=True, flush=True),
            Row("ADDJOB appendonly everysec, %d clients, -P 16" % clients, ("ADDJOB", "aq", "x" * 100, "0"),
                requests, clients, pipeline=16, aof=True, flush=True)]


def extra(paths, rows, rounds, warmup):
    """``rows`` on a node per build (and a node per build with the AOF on
    when a row needs it), rounds alternating; the median rate and CPU per
    request, with their ratios to the original's when it is a build."""
    nodes = {}
    try:
        for aof in sorted({row.aof for row in rows}):
            nodes[aof] = [start_node(p, aof) for p in paths]
        for row in rows:  # warm-up: the JIT and the allocator see the row's work first
            for node in nodes[row.aof]:
                row.run(node, max(row.clients * row.pipeline, min(warmup, row.n // 2)))
        runs = {(r, i): [] for r in range(len(rows)) for i in range(len(paths))}
        for _ in range(rounds):
            for r, row in enumerate(rows):
                for i, node in enumerate(nodes[row.aof]):
                    runs[(r, i)].append(row.run(node, row.n))
        orig = next((i for i, p in enumerate(paths) if is_original(p)), None)
        print("\n| row | build | requests | ops/s | x original | node CPU us/op | CPU x original |\n"
              "|---|---|---:|---:|---:|---:|---:|")
        for r, row in enumerate(rows):
            med = [(statistics.median(x[0] for x in runs[(r, i)]), statistics.median(x[1] for x in runs[(r, i)]))
                   for i in range(len(paths))]
            for i, path in enumerate(paths):
                rps, cpu = med[i]
                ratio = ("%.2f" % (rps / med[orig][0]), "%.2f" % (cpu / med[orig][1]) if med[orig][1] else "-") \
                    if orig is not None else ("-", "-")
                print("| %s | %s | %d | %.0f | %s | %.1f | %s |" % (row.label, path, row.n, rps, ratio[0], cpu,
                                                                    ratio[1]))
    finally:
        for group in nodes.values():
            for node in group:
                node.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("twistd", nargs="+")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20000)
    ap.add_argument("--pipeline", type=int, default=0,
                    help="add the single-node row ADDJOB -P N (4 x --requests)")
    ap.add_argument("--rows", default=None, help="single-node rows to run: " + ",".join(ROWS))
    ap.add_argument("--cluster", action="store_true")
    ap.add_argument("--cluster-only", action="store_true", help="only the 3-node rows")
    ap.add_argument("--pin", action="store_true",
                    help="3-node rows: the first node alone on CPU 0, the rest on the other CPUs (less noise)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="3-node rows to run: " + ",".join(SHAPES))
    ap.add_argument("--body-size", type=int, action="append", default=[],
                    help="add ADDJOB and GETJOB NOHANG rows with bodies of this many bytes (repeatable)")
    ap.add_argument("--body-clients", type=int, default=20)
    ap.add_argument("--aof", action="store_true", help="add ADDJOB rows with appendonly yes, everysec")
    ap.add_argument("--aof-clients", type=int, default=50)
    ap.add_argument("--skip-basic", action="store_true", help="no PING and ADDJOB rows")
    args = ap.parse_args()
    if not (args.cluster_only or args.skip_basic):
        names = (args.rows or DEFAULT_ROWS + (",addjob_p" if args.pipeline else "")).split(",")
        single(args.twistd, args.requests, args.rounds, args.warmup, names, args.pipeline or 16)
    rows = body_rows(args.body_size, args.requests, args.body_clients)
    if args.aof:
        rows += aof_rows(args.requests, args.aof_clients)
    if rows and not args.cluster_only:
        extra(args.twistd, rows, args.rounds, args.warmup)
    if args.cluster or args.cluster_only:
        cluster(args.twistd, args.requests // 2, args.rounds, args.warmup, args.shapes.split(","), args.pin)


if __name__ == "__main__":
    main()
