"""GETJOB's core path alone, for A/B runs with ``farm-bench --vs``: one
pure node (``disque.core.node.NodeState``, no reactor, no protocol), ``N``
rounds (200 by default) of ``BATCH`` jobs (1000) added, taken one GETJOB
at a time (``get_jobs`` of one queue, COUNT 1) and acknowledged, on an
unlimited queue; ``LIMITED=1`` limits *another* queue (so the check of a
limited queue exists but does not match), ``LIMITED=2`` the queue itself
(a rate and a concurrency too high to hold anything back).

``TREE`` takes the ``disque`` package from another checkout (a ``git
worktree`` of an older commit).  docs/benchmarks.md ("Queue limits") has
the figures::

    git worktree add --detach /tmp/limits-base main
    farm-bench -n 10 --vs "env TREE=/tmp/limits-base .venv/bin/python benchmarks/getjob_core_bench.py" \\
        -- .venv/bin/python benchmarks/getjob_core_bench.py
"""

import os
import random
import sys

if os.environ.get("TREE"):
    sys.path.insert(0, os.environ["TREE"])
else:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from disque.core.node import NodeState  # noqa: E402


def main():
    node = NodeState(b"33f36033a560e0980d7d71c8fc8c0db81156cc5e", 1_795_347_500_000, rng=random.Random(1))
    limited = os.environ.get("LIMITED")
    if limited:
        from disque.core import qlimits

        queue = b"q" if limited == "2" else b"other"
        node.settings.change(qlimits.KIND, queue, qlimits.encode(qlimits.Limit(10 ** 9, 10 ** 9, 10 ** 9)))
    add, get_jobs, ack = node.addjob.add, node.getjob.get_jobs, node.acks.ack_jobs
    names = [b"q"]
    batch = int(os.environ.get("BATCH", "1000"))
    for _ in range(int(os.environ.get("N", "200"))):
        ids = [add(b"q", b"body", 1, 0, -1, 3600, 0, False).id for _ in range(batch)]
        for _ in range(batch):
            get_jobs(names, 1)
        ack(ids)
        node.outbox.clear()


if __name__ == "__main__":
    main()
