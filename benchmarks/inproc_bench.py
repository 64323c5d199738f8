"""One client's unpipelined requests through the real RESP protocol and
dispatch of a node in memory (no sockets), for A/B runs of the request path
where the body or the AOF matters.

Usage (environment)::

    MODE=aof N=100000 [AOF=no] [BODY=100] .venv-pypy/bin/python benchmarks/inproc_bench.py
    MODE=getjob N=20000 [BODY=4096] .venv/bin/python benchmarks/inproc_bench.py

* ``aof``: ``N`` ADDJOBs, one read each, on a node with ``appendonly yes``
  and ``appendfsync everysec`` (``AOF=no``: off); the reactor's clock moves
  1 s every 2,000 requests (the everysec fsync runs inline: no thread
  pool).  Prints nothing: time the whole process with ``farm-bench --vs``.
* ``getjob``: 5 phases of ``N`` ADDJOBs (pipelined by 10, untimed) then
  ``N`` GETJOB NOHANG, one read each; prints the best phase's CPU time per
  GETJOB.

``TREE`` takes the ``disque`` package from another checkout (a ``git
worktree`` of an older commit).  docs/benchmarks.md ("Bodies of any size
and the AOF") has the figures.
"""

import os
import shutil
import sys
import tempfile
import time

if os.environ.get("TREE"):
    sys.path.insert(0, os.environ["TREE"])

from memnode import node_in_memory  # noqa: E402  (after TREE: the node is that tree's)


def addjob(queue, size):
    return b"*4\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(queue), queue, size, b"x" * size)


def main():
    mode = os.environ.get("MODE", "aof")
    n = int(os.environ.get("N", "100000"))
    size = int(os.environ.get("BODY", "100" if mode == "aof" else "4096"))
    workdir = tempfile.mkdtemp(prefix="inproc-bench-")
    overrides = {"dir": workdir, "cluster-config-file": workdir + "/nodes.conf"}
    if mode == "aof":
        overrides.update({"appendonly": os.environ.get("AOF", "yes"), "appendfsync": "everysec"})
    else:
        overrides["persistence"] = "none"
    service, reactor, proto, transport = node_in_memory(overrides)
    try:
        if mode == "aof":
            request = addjob(b"aq", size)
            for i in range(n):
                proto.dataReceived(request)
                transport.clear()
                if i % 2000 == 1999:
                    reactor.advance(1)
        else:
            adds = addjob(b"bq", size) * 10
            get = b"*4\r\n$6\r\nGETJOB\r\n$6\r\nNOHANG\r\n$4\r\nFROM\r\n$2\r\nbq\r\n"
            best = float("inf")
            for _ in range(5):
                for _ in range(n // 10):
                    proto.dataReceived(adds)
                    transport.clear()
                start = time.process_time()
                for i in range(n):
                    proto.dataReceived(get)
                    if i % 64 == 0:
                        transport.clear()
                best = min(best, (time.process_time() - start) / n)
                transport.clear()
            print("%s GETJOB NOHANG, %d-byte bodies: %.2f us CPU a request" % (sys.implementation.name, size, best * 1e6))
    finally:
        service.stopService()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
