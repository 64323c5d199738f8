"""How close a 3-node cluster keeps a queue to its limits (QLIMIT,
docs/extensions.md "Queue limits") under skewed consumers.

Usage::

    .venv/bin/python benchmarks/limits_bench.py [--twistd .venv-pypy/bin/twistd]
        [--rate 50] [--concurrency 5] [--consumers 1,2,10] [--seconds 20] [--warmup 3]
        [--hold-ms 20,100] [--seed 1]

Starts three real nodes (``tests/support/process.start_cluster``, on
``--twistd``, default ``.venv/bin/twistd``), then:

1. **Rate.** ``QLIMIT lq RATE <rate>`` (burst: the default, one second's
   worth) on node 0; jobs added on every node (REPLICATE 1, enough for the
   run); ``--consumers`` threads on nodes 0, 1 and 2 (1, 2 and 10 by
   default), each looping ``GETJOB TIMEOUT 500 FROM lq`` then ``ACKJOB``.
   After ``--warmup`` seconds (the split settles), deliveries are counted
   for ``--seconds`` by the time the client got them: the cluster's rate
   as a ratio to the limit, and each node's part against its part of the
   consumers.
2. **Concurrency.** ``QLIMIT lq CONCURRENCY <c>`` (no rate) on node 1; the
   same consumers hold each job a random ``--hold-ms`` time (seeded) before
   its ACKJOB.  The high-water mark of jobs in flight as the clients see
   them (from the GETJOB reply to the ACKJOB sent: never more than the
   nodes count), cluster-wide and per node, against ``c``; and the
   deliveries per second it allowed.

The nodes are killed at the end, whatever happens.
"""

import argparse
import os
import random
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the root: tests.support

from tests.support.process import call, start_cluster, wait_for  # noqa: E402

Q = "lq"


def add_jobs(nodes, per_node):
    for node in nodes:
        c = node.client()
        try:
            for start in range(0, per_node, 500):
                n = min(500, per_node - start)
                c.send(b"".join(c.encode("ADDJOB", Q, "x", "0", "REPLICATE", "1") for _ in range(n)))
                for _ in range(n):
                    c.read()
        finally:
            c.close()


def set_limit(nodes, via, option, value):
    """QLIMIT lq <option> <value> on node ``via``; back once every node shows it."""
    assert call(nodes[via], "QLIMIT", Q, option, value) == b"OK"
    key = option.lower().encode()

    def everywhere():
        for node in nodes:
            shown = call(node, "QLIMIT", Q)
            got = dict(zip(shown[::2], shown[1::2])).get(key)
            if (got.decode() if isinstance(got, bytes) else str(got)) != value:
                return False
        return True
    wait_for(everywhere, timeout=10, what="the limit on every node")


def run(nodes, counts, hold, seconds, warmup):
    """Consumers on every node for ``warmup + seconds``; returns the log
    of (time, +1 delivered / -1 ACK about to be sent, node) and the start
    of the measured window."""
    stop, lock, log = threading.Event(), threading.Lock(), []

    def consumer(i, rng):
        c = nodes[i].client()
        try:
            while not stop.is_set():
                got = c.call("GETJOB", "TIMEOUT", "500", "FROM", Q)
                if not got:
                    continue
                with lock:
                    log.append((time.monotonic(), 1, i))
                if hold:
                    time.sleep(rng.uniform(*hold) / 1000.0)
                with lock:
                    log.append((time.monotonic(), -1, i))
                c.call("ACKJOB", got[0][1])
        finally:
            c.close()

    seed = random.Random(ARGS.seed)
    threads = [threading.Thread(target=consumer, args=(i, random.Random(seed.random())), daemon=True)
               for i, n in enumerate(counts) for _ in range(n)]
    for t in threads:
        t.start()
    start = time.monotonic() + warmup
    time.sleep(warmup + seconds)
    stop.set()
    for t in threads:
        t.join(5)
    return log, start


def rate_part(nodes, counts):
    set_limit(nodes, 0, "RATE", "%g" % ARGS.rate)
    add_jobs(nodes, int(ARGS.rate * (ARGS.seconds + ARGS.warmup) * 1.2) + 100)
    log, start = run(nodes, counts, None, ARGS.seconds, ARGS.warmup)
    window = [i for t, d, i in log if d > 0 and start <= t < start + ARGS.seconds]
    rate = len(window) / ARGS.seconds
    print("rate limit %g/s, consumers %s, %d s measured after %d s: %.2f deliveries/s, ratio %.3f"
          % (ARGS.rate, "/".join(map(str, counts)), ARGS.seconds, ARGS.warmup, rate, rate / ARGS.rate))
    total = sum(counts)
    for i, n in enumerate(counts):
        print("  node %d: %5.1f%% of the deliveries (%5.1f%% of the consumers)"
              % (i, 100.0 * window.count(i) / max(1, len(window)), 100.0 * n / total))
    held = [call(node, "QLIMIT", Q) for node in nodes]
    print("  held (QLIMIT held, per node): %s" % [dict(zip(h[::2], h[1::2])).get(b"held") for h in held])


def concurrency_part(nodes, counts):
    for node in nodes:  # what the first part left queued: drop it, then fill again
        call(node, "DEBUG", "FLUSHALL")
    set_limit(nodes, 1, "CONCURRENCY", str(ARGS.concurrency))
    hold = tuple(int(x) for x in ARGS.hold_ms.split(","))
    per_second = 1000.0 / hold[0] * ARGS.concurrency
    add_jobs(nodes, int(per_second * (ARGS.seconds + ARGS.warmup)) + 100)
    log, start = run(nodes, counts, hold, ARGS.seconds, ARGS.warmup)
    flying, high, per_node, per_high = 0, 0, [0] * len(nodes), [0] * len(nodes)
    for t, d, i in sorted(log):
        flying += d
        per_node[i] += d
        high = max(high, flying)
        per_high[i] = max(per_high[i], per_node[i])
    delivered = sum(1 for t, d, _ in log if d > 0 and start <= t < start + ARGS.seconds)
    print("concurrency limit %d, consumers %s holding %s ms: high-water mark %d cluster-wide (%.2f x C), "
          "per node %s; %.1f deliveries/s"
          % (ARGS.concurrency, "/".join(map(str, counts)), ARGS.hold_ms, high, high / ARGS.concurrency,
             per_high, delivered / ARGS.seconds))


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--twistd", default=os.path.join(os.path.dirname(HERE), ".venv", "bin", "twistd"))
    p.add_argument("--rate", type=float, default=50)
    p.add_argument("--concurrency", type=int, default=5)
    p.add_argument("--consumers", default="1,2,10")
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hold-ms", default="20,100")
    p.add_argument("--seed", type=int, default=1)
    ARGS = p.parse_args()
    counts = [int(x) for x in ARGS.consumers.split(",")]
    nodes = start_cluster(tempfile.mkdtemp(prefix="limits-bench-"), 3, twistd=os.path.abspath(ARGS.twistd))
    try:
        rate_part(nodes, counts)
        concurrency_part(nodes, counts)
    finally:
        for node in nodes:
            node.kill()


ARGS = None

if __name__ == "__main__":
    main()
