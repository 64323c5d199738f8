"""QLIMIT on a real 3-node cluster (docs/extensions.md, "Queue limits"):
set over redis-cli on one node, it reaches the others; consumers on all
three nodes are never delivered more than the limit allows over the
measured window (burst included), nor more jobs at once than the
concurrency.  Upper bounds only: they hold on a busy machine, where a
tight lower bound would not (the +-10% figure is benchmarks/limits_bench.py's)."""

import threading
import time

from tests.support.process import call, redis_cli, wait_for

Q = "plq"


def limits_everywhere(nodes, fields):
    def seen():
        for node in nodes:
            shown = call(node, "QLIMIT", Q)
            got = dict(zip(shown[::2], shown[1::2]))
            if any(got.get(k) != v for k, v in fields.items()):
                return False
        return True
    wait_for(seen, timeout=10, what="the limit on every node")


def consume(nodes, counts, hold_s, stop, log, lock, errors):
    """``counts[i]`` consumer threads on node ``i``: GETJOB, hold the job
    ``hold_s``, ACKJOB; ``log`` gets (receipt time, +1 or -1 for an ack
    about to be sent, node)."""

    def consumer(node):
        c = node.client()
        try:
            while not stop.is_set():
                got = c.call("GETJOB", "TIMEOUT", "200", "FROM", Q)
                if not got:
                    continue
                with lock:
                    log.append((time.monotonic(), 1))
                stop.wait(hold_s)
                with lock:
                    log.append((time.monotonic(), -1))
                c.call("ACKJOB", got[0][1])
        except Exception as e:  # pragma: no cover - reported by the test
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=consumer, args=(node,), daemon=True)
               for node, n in zip(nodes, counts) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def run_consumers(trio, counts, hold_s, want):
    stop, lock, log, errors = threading.Event(), threading.Lock(), [], []
    start = time.monotonic()
    threads = consume(trio, counts, hold_s, stop, log, lock, errors)
    try:
        wait_for(lambda: sum(1 for _, d in log if d > 0) >= want, timeout=60, interval=0.05,
                 what="%d deliveries" % want)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    return start, log


def add_jobs(trio, n):
    for node in trio:
        c = node.client()
        try:
            for _ in range(n):
                assert c.call("ADDJOB", Q, "x", "0", "REPLICATE", "1").startswith(b"D-")
        finally:
            c.close()


def test_a_rate_limit_holds_cluster_wide(trio):
    rc, out = redis_cli(trio[0].port, "QLIMIT", Q, "RATE", "20", "BURST", "5")
    assert rc == 0 and out.strip() == b"OK"
    limits_everywhere(trio, {b"rate": b"20", b"burst": 5})
    add_jobs(trio, 30)
    start, log = run_consumers(trio, [1, 2, 4], 0, 40)
    end = max(t for t, _ in log)
    delivered = sum(1 for _, d in log if d > 0)
    # Every delivery happened between the first GETJOB and the last reply:
    # at most B (5, plus one token of floor per node) + R * t.
    assert delivered <= 5 + 3 + 20 * (end - start), (delivered, end - start)
    held = sum(call(node, "QLIMIT", Q)[13] for node in trio)
    assert held > 0


def test_a_concurrency_limit_holds_cluster_wide(trio):
    rc, out = redis_cli(trio[1].port, "QLIMIT", Q, "CONCURRENCY", "3")
    assert rc == 0 and out.strip() == b"OK"
    limits_everywhere(trio, {b"concurrency": 3, b"rate": b"0"})
    add_jobs(trio, 20)
    _, log = run_consumers(trio, [1, 2, 4], 0.05, 30)
    flying = high = 0
    for _, d in sorted(log):
        flying += d
        high = max(high, flying)
    # As clients see it (from the reply to the ACK sent): never above C.
    assert 1 <= high <= 3, high
    rc, out = redis_cli(trio[2].port, "QLIMIT", Q, "NONE")
    assert rc == 0 and out.strip() == b"OK"
    wait_for(lambda: all(call(node, "QLIMIT", Q) == [] for node in trio), timeout=10, what="the limit gone")
