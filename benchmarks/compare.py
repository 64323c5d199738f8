"""Compare nodes of several builds side by side, in one run.

Usage::

    .venv/bin/python benchmarks/compare.py TWISTD [TWISTD ...] [--requests 100000]
        [--rounds 3] [--cluster | --cluster-only]

Each TWISTD is the ``twistd`` of a virtualenv holding one build, or
``TWISTD=CHECKOUT`` to run that virtualenv's interpreter on the code of
another checkout (``git worktree add /tmp/old <rev>``; the checkout goes
first on the node's ``PYTHONPATH``, no second install needed), or another
runtime (``.venv-pypy/bin/twistd``), or the original server's binary
(``../shared/bin/disque-server-1.0rc1``, see ``original.py``).  A node of each build runs at once;
PING and ADDJOB rounds alternate between them, so a noisy neighbour hits
every build alike, and the median of the rounds is printed with the node
CPU time per request.  ``--cluster`` adds a 3-node REPLICATE 3 cluster per
build (unpipelined and -P 16), all running at once, their rounds
alternating too; it prints the CPU of the node the clients talk to and of
the whole cluster, per request.
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
from run import cpu_seconds, measured  # noqa: E402
from tests.support.process import NodeProcess, start_cluster  # noqa: E402

COMMANDS = (("PING",), ("ADDJOB", "q", "x" * 100, "0"))


def build(spec):
    """(twistd, environment) of a TWISTD[=CHECKOUT] argument."""
    twistd, _, checkout = spec.partition("=")
    return os.path.abspath(twistd), ({"PYTHONPATH": os.path.abspath(checkout)} if checkout else None)


def start_node(path):
    """A started node of the build ``path``."""
    workdir = tempfile.mkdtemp(prefix="disque-compare-")
    if is_original(path):
        return OriginalProcess(workdir, os.path.abspath(path)).start()
    twistd, env = build(path)
    return NodeProcess(workdir, twistd=twistd, env=env).start()


def start_build_cluster(path, n=3):
    """``n`` started nodes of the build ``path`` in a full mesh."""
    workdir = tempfile.mkdtemp(prefix="disque-compare-")
    if is_original(path):
        return start_original_cluster(workdir, n, os.path.abspath(path))
    twistd, env = build(path)
    return start_cluster(workdir, n, twistd=twistd, env=env)


def single(paths, n, rounds, warmup):
    nodes = [start_node(p) for p in paths]
    try:
        for node in nodes:
            for command in COMMANDS:
                measured(node, warmup, *command)
        runs = {(i, c[0]): [] for i in range(len(nodes)) for c in COMMANDS}
        for _ in range(rounds):
            for command in COMMANDS:
                for i, node in enumerate(nodes):
                    runs[(i, command[0])].append(measured(node, n, *command))
        print("| command | twistd | ops/s | node CPU us/op |\n|---|---|---:|---:|")
        for command in COMMANDS:
            for i, path in enumerate(paths):
                r = runs[(i, command[0])]
                print("| %s | %s | %.0f | %.1f |" % (command[0], path, statistics.median(x[0] for x in r),
                                                    statistics.median(x[2] for x in r)))
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("twistd", nargs="+")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20000)
    ap.add_argument("--cluster", action="store_true")
    ap.add_argument("--cluster-only", action="store_true", help="only the 3-node rows")
    ap.add_argument("--pin", action="store_true",
                    help="3-node rows: the first node alone on CPU 0, the rest on the other CPUs (less noise)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="3-node rows to run: " + ",".join(SHAPES))
    args = ap.parse_args()
    if not args.cluster_only:
        single(args.twistd, args.requests, args.rounds, args.warmup)
    if args.cluster or args.cluster_only:
        cluster(args.twistd, args.requests // 2, args.rounds, args.warmup, args.shapes.split(","), args.pin)


if __name__ == "__main__":
    main()
