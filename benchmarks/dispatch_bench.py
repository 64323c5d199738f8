"""The request path in memory, for A/B runs with ``farm-bench --vs``: a
node (``persistence none``) and one loopback client sending ``N`` reads of
``PIPELINE`` pipelined ``ADDJOB a:q`` and as many pipelined ``QLEN a:q``
through the real RESP protocol and dispatch (``N`` 2000 and ``PIPELINE``
100 by default; ``PIPELINE=1``: every request a read of its own).

Environment: ``USER_NAME`` runs them as a user limited to ``~a:*`` (AUTH
first); ``TREE`` takes the ``disque`` package from another checkout (a
``git worktree`` of an older commit).  docs/benchmarks.md ("Access
control") has the figures::

    farm-bench -n 10 --vs "env USER_NAME=alice N=1500 .venv/bin/python benchmarks/dispatch_bench.py" \\
        -- env N=1500 .venv/bin/python benchmarks/dispatch_bench.py
"""

import os
import sys

if os.environ.get("TREE"):
    sys.path.insert(0, os.environ["TREE"])

from memnode import node_in_memory  # noqa: E402  (after TREE: the node is that tree's)


def main():
    user = os.environ.get("USER_NAME")
    nodes_file = "/tmp/dispatch-bench-nodes-%d.conf" % os.getpid()
    overrides = {"dir": "/tmp", "persistence": "none", "cluster-config-file": nodes_file}
    if user:
        overrides["user"] = "%s on >pw ~a:* +@all" % user
    service, _, proto, transport = node_in_memory(overrides)
    if user:
        proto.dataReceived(b"*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$2\r\npw\r\n" % (len(user), user.encode()))
    pipeline = int(os.environ.get("PIPELINE", "100"))
    adds = b"*4\r\n$6\r\nADDJOB\r\n$3\r\na:q\r\n$4\r\nbody\r\n$1\r\n0\r\n" * pipeline
    qlens = b"*2\r\n$4\r\nQLEN\r\n$3\r\na:q\r\n" * pipeline
    for i in range(int(os.environ.get("N", "2000"))):
        proto.dataReceived(adds)
        proto.dataReceived(qlens)
        transport.clear()
        if i % (5000 // pipeline) == 0:  # keep the node small (5000 jobs)
            proto.dataReceived(b"*2\r\n$5\r\nDEBUG\r\n$8\r\nFLUSHALL\r\n")
            transport.clear()
    service.stopService()
    try:
        os.unlink(nodes_file)
    except OSError:
        pass


if __name__ == "__main__":
    main()
