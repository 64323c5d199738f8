"""Compare nodes of several builds side by side, in one run.

Usage::

    .venv/bin/python benchmarks/compare.py TWISTD [TWISTD ...] [--requests 100000]
        [--rounds 3] [--cluster]

Each TWISTD is the ``twistd`` of a virtualenv holding one build: another
checkout (``git worktree add ../old <rev>``, then its own venv) or another
runtime (``.venv-pypy/bin/twistd``).  A node of each build runs at once;
PING and ADDJOB rounds alternate between them, so a noisy neighbour hits
every build alike, and the median of the rounds is printed with the node
CPU time per request.  ``--cluster`` adds a 3-node REPLICATE 3 cluster per
build (unpipelined and -P 16), one build after the other.
"""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)

from run import measured  # noqa: E402
from support import NodeProcess, start_cluster  # noqa: E402

COMMANDS = (("PING",), ("ADDJOB", "q", "x" * 100, "0"))


def single(paths, n, rounds, warmup):
    nodes = [NodeProcess(tempfile.mkdtemp(prefix="disque-compare-"), twistd=p).start() for p in paths]
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


def cluster(paths, n, warmup):
    print("\n| 3-node REPLICATE 3 | twistd | ops/s | p50 ms | node CPU us/op |\n|---|---|---:|---:|---:|")
    for path in paths:
        nodes = start_cluster(tempfile.mkdtemp(prefix="disque-compare-"), 3, twistd=path)
        try:
            measured(nodes[0], warmup, "ADDJOB", "w", "x" * 100, "0")
            for label, pipeline in (("unpipelined", 1), ("-P 16", 16)):
                rps, p50, cpu = measured(nodes[0], n, "ADDJOB", "q", "x" * 100, "0", pipeline=pipeline)
                print("| %s | %s | %.0f | %.2f | %.1f |" % (label, path, rps, p50, cpu))
        finally:
            for node in nodes:
                node.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("twistd", nargs="+")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20000)
    ap.add_argument("--cluster", action="store_true")
    args = ap.parse_args()
    args.twistd = [os.path.abspath(path) for path in args.twistd]  # the nodes run in their own directories
    single(args.twistd, args.requests, args.rounds, args.warmup)
    if args.cluster:
        cluster(args.twistd, args.requests // 2, args.warmup)


if __name__ == "__main__":
    main()
