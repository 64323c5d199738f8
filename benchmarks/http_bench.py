"""What the HTTP side costs the node (docs/observability.md), beside
redis-server doing the nearest thing in the same run.

Usage::

    .venv/bin/python benchmarks/http_bench.py [--queues 10000] [--jobs 100000] [--rounds 20]
        [--twistd PATH]

A node with ``http-port`` holds ``--jobs`` jobs spread over ``--queues``
queues; redis-server holds as many list items over as many lists.  The
figures, median of ``--rounds`` requests each:

* ``GET /metrics`` and ``GET /api/queues`` (1000 rows) on the node, against
  ``INFO ALL`` on redis-server (its whole state report): wall time and the
  server's CPU per request;
* the idle CPU of the node with the HTTP side on (the rates sampler visits
  every queue once a second) and off, and of redis-server, over 10 s.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the root: tests.support
sys.path.insert(0, HERE)

from run import cpu_seconds, idle_cpu, start_redis  # noqa: E402
from tests.support.process import Client, NodeProcess, free_port  # noqa: E402


def spread(port, queues, jobs, command):
    """``jobs`` items over ``queues`` names (pipelined)."""
    c = Client(port, timeout=300)
    batch = []
    for i in range(jobs):
        name = "queue-%d" % (i % queues)
        batch.append(Client.encode(*command(name)))
        if len(batch) == 1000:
            c.send(b"".join(batch))
            for _ in batch:
                c.read()
            batch = []
    if batch:
        c.send(b"".join(batch))
        for _ in batch:
            c.read()
    c.close()


def timed(fn, rounds, pid):
    """(median ms, server CPU ms per call) of ``rounds`` calls of ``fn``
    (the CPU over all of them: /proc counts in 10 ms ticks)."""
    walls = []
    cpu = cpu_seconds(pid)
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - t) * 1000)
    return statistics.median(walls), (cpu_seconds(pid) - cpu) * 1000 / rounds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--twistd", default=None)
    args = ap.parse_args()
    http = free_port()
    work = tempfile.mkdtemp(prefix="disque-http-bench-")
    node = NodeProcess(os.path.join(work, "on"), args=["--set", "http-port=%d" % http], twistd=args.twistd).start()
    off = NodeProcess(os.path.join(work, "off"), twistd=args.twistd).start()
    redis, redis_port = start_redis()
    try:
        for n in (node, off):
            spread(n.port, args.queues, args.jobs, lambda q: ("ADDJOB", q, "x" * 100, "0"))
        spread(redis_port, args.queues, args.jobs, lambda q: ("LPUSH", q, "x" * 100))

        def get(path):
            return lambda: urllib.request.urlopen("http://127.0.0.1:%d%s" % (http, path), timeout=60).read()

        rc = Client(redis_port)
        redis_info = timed(lambda: rc.call("INFO", "ALL"), args.rounds * 50, redis.pid)
        rows = [
            ("GET /metrics", timed(get("/metrics"), args.rounds, node.proc.pid)),
            ("GET /api/queues (1000 rows)", timed(get("/api/queues?limit=1000"), args.rounds, node.proc.pid)),
            ("GET /api/node", timed(get("/api/node"), args.rounds, node.proc.pid)),
        ]
        rc.close()
        print("%d jobs over %d queues, node on %s; median of %d requests (INFO: %d)\n" % (
            args.jobs, args.queues, node.twistd, args.rounds, args.rounds * 50))
        print("| request | ms | x redis INFO ALL | server CPU ms | x redis |\n|---|---:|---:|---:|---:|")
        print("| redis-server INFO ALL | %.3f | 1 | %.3f | 1 |" % redis_info)
        for name, (wall, cpu) in rows:
            print("| %s | %.2f | %.0f | %.2f | %.0f |" % (name, wall, wall / redis_info[0], cpu,
                                                         cpu / max(redis_info[1], 0.001)))
        time.sleep(2)  # let the fill settle
        on, idle_off, idle_redis = idle_cpu(node.proc.pid, 10), idle_cpu(off.proc.pid, 10), idle_cpu(redis.pid, 10)
        print("\n| idle, 10 s | CPU % of a core |\n|---|---:|")
        print("| node, HTTP side on (sampler) | %.2f |\n| node, HTTP side off | %.2f |\n| redis-server | %.2f |"
              % (on, idle_off, idle_redis))
    finally:
        node.stop()
        off.stop()
        if redis is not None:
            redis.kill()


if __name__ == "__main__":
    main()
