"""Jobs per second through the clients (disque.client, disque.worker), each
beside the same pattern run by the raw library against redis-server in the
same run.

Usage::

    .venv/bin/python benchmarks/client_bench.py [--jobs 20000] [--rounds 3] [--twistd PATH]

The clients run in this interpreter (``.venv-pypy/bin/python`` measures them
on PyPy); the node runs on ``--twistd`` (default: this interpreter's).  The
figures, median of ``--rounds``, each with its calibration:

* ``add, 1 in flight``: ``DisqueClient.add_job`` awaited one by one, against
  txredisapi's LPUSH awaited one by one on redis-server;
* ``add, 50 in flight``: 50 concurrent add_job loops on the client's one
  pipelined connection, against 50 LPUSH loops on one txredisapi connection;
* ``blocking add``: ``BlockingClient.add_job`` in a loop, against the same
  socket-and-hiredis connection's LPUSH loop;
* ``worker cycle``: a :class:`~disque.worker.Worker` with a handler that
  does nothing and concurrency 50 takes a backlog of jobs (GETJOB COUNT,
  then ACKJOB per job), against 50 loops of the Redis reliable-queue cycle
  (RPOPLPUSH into a processing list, then LREM) on txredisapi;
* the raw figures of ``redis-benchmark`` (50 clients): ADDJOB on the node,
  LPUSH on redis-server.

With each: the node's CPU time per job, and this process's (the client's).
"""

import argparse
import os
import resource
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the root: tests.support
sys.path.insert(0, HERE)

from run import cpu_seconds, redis_benchmark, start_redis  # noqa: E402
from tests.support.process import NodeProcess  # noqa: E402

BODY = b"x" * 100


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(fn, n, server_pid):
    """(jobs/s, server CPU us/job, client CPU us/job) of ``fn(n)``."""
    server0, client0, t0 = cpu_seconds(server_pid), own_cpu(), time.perf_counter()
    fn(n)
    elapsed = time.perf_counter() - t0
    return (n / elapsed, (cpu_seconds(server_pid) - server0) / n * 1e6, (own_cpu() - client0) / n * 1e6)


# -- the patterns, on the reactor thread of tests/support/tx.py -------------------------

def tx_loops(make_call, n, loops):
    """``loops`` concurrent loops, ``n`` calls in all, each awaited."""
    from twisted.internet import defer

    from tests.support.tx import run

    @defer.inlineCallbacks
    def loop(count):
        for _ in range(count):
            yield make_call()

    def all_loops():
        share = [n // loops + (1 if i < n % loops else 0) for i in range(loops)]
        return defer.gatherResults([loop(k) for k in share if k], consumeErrors=True)

    run(all_loops)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--twistd", default=os.path.join(os.path.dirname(sys.executable), "twistd"))
    args = parser.parse_args()
    n = args.jobs

    import txredisapi

    from disque.client import BlockingClient, DisqueClient
    from disque.client.connection import Connection
    from disque.worker import Worker
    from tests.support.tx import reactor, run

    redis_proc, redis_port = start_redis()
    if redis_proc is None:
        sys.exit("redis-server not found: apt-get install redis-server (the calibration)")
    node = NodeProcess(tempfile.mkdtemp(prefix="disque-client-bench-"), twistd=os.path.abspath(args.twistd)).start()
    r = reactor()
    try:
        client = DisqueClient([("127.0.0.1", node.port)], reactor=r)
        redis_tx = run(txredisapi.Connection, "127.0.0.1", redis_port, reconnect=False, charset=None,
                       convertNumbers=False)
        blocking = BlockingClient([("127.0.0.1", node.port)])
        redis_raw = Connection("127.0.0.1", redis_port)
        rpid, npid = redis_proc.pid, node.proc.pid

        def fill_redis(k):
            redis_raw.pipeline([("LPUSH", "rq", BODY)] * k)

        def fill_node(k):
            Connection("127.0.0.1", node.port).pipeline([("ADDJOB", "wq", BODY, 0)] * k)

        def worker_cycle(k):
            done = {"n": 0}

            def handler(job):
                done["n"] += 1

            worker = Worker(handler, ["wq"], client=client, concurrency=50, fetch_timeout=100, reactor=r)
            run(worker.startService)
            while run(lambda: worker.stats["acked"]) < k:
                time.sleep(0.005)
            run(worker.stopService)

        def redis_cycle(k):
            tx_loops(lambda: redis_tx.rpoplpush("rq", "processing").addCallback(
                lambda v: redis_tx.lrem("processing", 1, v)), k, 50)

        figures = [
            ("add, 1 in flight",
             lambda k: tx_loops(lambda: client.add_job("aq", BODY), k, 1), npid,
             lambda k: tx_loops(lambda: redis_tx.lpush("lq", BODY), k, 1), rpid, None),
            ("add, 50 in flight",
             lambda k: tx_loops(lambda: client.add_job("aq", BODY), k, 50), npid,
             lambda k: tx_loops(lambda: redis_tx.lpush("lq", BODY), k, 50), rpid, None),
            ("blocking add",
             lambda k: [blocking.add_job("bq", BODY) for _ in range(k)], npid,
             lambda k: [redis_raw.call("LPUSH", "bl", BODY) for _ in range(k)], rpid, None),
            ("worker cycle (concurrency 50)", worker_cycle, npid, redis_cycle, rpid, (fill_node, fill_redis)),
        ]
        # Warm up both sides (PyPy's JIT, the node's too).
        for name, ours, our_pid, theirs, their_pid, fills in figures:
            if fills:
                fills[0](min(n, 5000))
                fills[1](min(n, 5000))
            ours(min(n, 5000))
            theirs(min(n, 5000))
        results = {}
        for _ in range(args.rounds):
            for name, ours, our_pid, theirs, their_pid, fills in figures:
                if fills:
                    fills[0](n)
                    fills[1](n)
                results.setdefault((name, "disque"), []).append(measure(ours, n, our_pid))
                results.setdefault((name, "redis"), []).append(measure(theirs, n, their_pid))
        raw_node = redis_benchmark(node.port, 50, 100000, "ADDJOB", "q", BODY.decode(), "0")
        raw_redis = redis_benchmark(redis_port, 50, 100000, "LPUSH", "q", BODY.decode())

        runtime = "%s %s" % (sys.implementation.name, sys.version.split()[0])
        print("clients on %s, node on %s, %d jobs per figure, median of %d rounds\n"
              % (runtime, args.twistd, n, args.rounds))
        print("| pattern | disque jobs/s | redis-server jobs/s (same pattern, raw library) | ratio "
              "| node CPU us/job | client CPU us/job (disque / raw on redis) |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, *_ in figures:
            ours = sorted(results[(name, "disque")])[len(results[(name, "disque")]) // 2]
            theirs = sorted(results[(name, "redis")])[len(results[(name, "redis")]) // 2]
            print("| %s | %.0f | %.0f | %.2f | %.1f | %.1f / %.1f |" % (
                name, ours[0], theirs[0], ours[0] / theirs[0], ours[1], ours[2], theirs[2]))
        print("| redis-benchmark, 50 clients: ADDJOB / LPUSH | %.0f | %.0f | %.2f | - | - |"
              % (raw_node[0], raw_redis[0], raw_node[0] / raw_redis[0]))
    finally:
        node.stop()
        redis_proc.kill()
        redis_proc.wait()


if __name__ == "__main__":
    main()
