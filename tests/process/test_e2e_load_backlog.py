"""A node restarted from a big AOF whose jobs' requeue times all passed
while it was down: it requeues them in bounded steps (``MAX_DUE_PER_RUN``
in disque/core/node.py), answering clients between the steps.

``DISQUE_BACKLOG_JOBS=500000 pytest -s tests/process/test_e2e_load_backlog.py``
runs it on more jobs and prints the longest stall seen."""

import os
import time

from tests.support.process import NodeProcess, connect_when_listening, wait_for

N = int(os.environ.get("DISQUE_BACKLOG_JOBS", "200000"))
BOUND = 1.0  # s: the longest round trip allowed (without the cap: seconds)


def write_overdue_aof(path, n):
    """``n`` LOADJOB records of RETRY 30 jobs created two minutes ago: their
    requeue time passed 90 s ago.  REPLICATE 1: no other copy to wait for."""
    from disque.core.node import NodeState
    from disque.persistence.records import record_bytes

    node = NodeState(b"a" * 40, now=int(time.time() * 1000) - 120_000)
    with open(path, "wb") as f:
        chunk = []
        for i in range(n):
            job = node.addjob.add(b"oq", b"body-%08d" % i, 1, 0, 30, 3600, 0, False)
            chunk.append(record_bytes((b"LOADJOB", job)))
            if len(chunk) == 10_000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))


def test_overdue_loaded_jobs_are_requeued_while_clients_are_answered(tmp_path):
    node = NodeProcess(tmp_path / "n", args=("--appendonly", "yes", "--set", "appendfsync=everysec"))
    write_overdue_aof(os.path.join(node.workdir, "disque.aof"), N)
    node.start(wait=False)
    try:
        c = connect_when_listening(node, timeout=30)
        longest = [0.0, 0.0]  # s, the longest round trip until the first PONG, and after

        def timed(*args, after=1):
            start = time.perf_counter()
            reply = c.call(*args)
            longest[after] = max(longest[after], time.perf_counter() - start)
            return reply
        # -LOADING while the file loads (in short slices), then PONG.
        wait_for(lambda: timed("PING", after=0) == b"PONG", timeout=60, interval=0.005, what="the load")
        calls = 0

        def all_queued():
            nonlocal calls
            calls += 2
            return timed("PING") == b"PONG" and timed("QLEN", "oq") == N
        wait_for(all_queued, timeout=60, interval=0.005, what="every job queued")
        print("\n%d overdue jobs: the longest round trip %.3f s until the first PONG, %.3f s after it (%d PINGs "
              "and QLENs)" % (N, longest[0], longest[1], calls))
        # The requeues: a bounded amount of work per reactor turn.
        assert longest[1] < BOUND, "a client waited %.3f s" % longest[1]
        assert calls > 10  # answered throughout, not once before and once after
        # The end of the load (Jobs.finish_load) is one turn: a sanity bound.
        assert longest[0] < 2 * BOUND, "a client waited %.3f s" % longest[0]
        # Each queued once, its delivery counted once.
        for item in c.call("QPEEK", "oq", "5") + c.call("QPEEK", "oq", "-5"):
            fields = c.call("SHOW", item[1])
            shown = dict(zip(fields[::2], fields[1::2]))
            assert shown[b"state"] == b"queued" and shown[b"additional-deliveries"] == 1, shown
        c.close()
    finally:
        node.kill()
