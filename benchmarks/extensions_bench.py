"""What the job-queue extensions (docs/extensions.md: PRIORITY, BACKOFF,
MAXDELIVERIES / DEADLETTER, NACK ... DELAY) cost one node, beside
redis-server measured in the same run.

Usage::

    .venv/bin/python benchmarks/extensions_bench.py [--twistd .venv-pypy/bin/twistd]
        [--requests 100000] [--rounds 3] [--consume-jobs 50000] [--memory-jobs 200000]
        [--skip-addjob] [--skip-consume] [--skip-memory]

The node runs on ``--twistd`` (default: ``.venv/bin/twistd``, CPython); the
clients run in this interpreter.  This machine is shared and noisy, so the
variants of each part alternate within every round (their order rotating
from one round to the next), redis-server's counterpart is measured in the
same round, and the median of ``--rounds`` is printed for each figure, with
the node's CPU time per request or per job (user + system, from
``/proc/<pid>/stat``; a busy neighbour disturbs it much less than the rate)
and the range of that CPU figure over the rounds.

1. **ADDJOB** (``redis-benchmark``, 50 clients, unpipelined, 100-byte
   bodies; the node emptied with ``DEBUG FLUSHALL`` before each run, so
   every run starts from the same state): plain, ``PRIORITY 7``, and
   ``PRIORITY 7 BACKOFF EXP 100 10000 MAXDELIVERIES 5``; against
   redis-server's ``LPUSH``.
2. **Consume cycles** (one client, windows of ``--depth`` jobs pipelined:
   ``--depth`` ``GETJOB NOHANG FROM q``, then one ``ACKJOB id`` per job):
   from a queue of plain jobs, of jobs with priorities 1..9 mixed, and of
   jobs with mixed priorities, BACKOFF and MAXDELIVERIES; against Redis'
   reliable-queue cycle (``RPOPLPUSH q processing``, then ``LREM
   processing 1 value``).  Then NACK cycles on a pool of 10,000 plain jobs:
   ``GETJOB`` then ``NACK id`` (queued again at once) or ``NACK id DELAY 1``
   (queued again by the node's timer 1 ms later); against ``RPOPLPUSH q
   processing`` then ``RPOPLPUSH processing q``.  The queue is filled before
   each run, outside the measure.
3. **Memory per job**: a fresh node per variant and round is filled with
   ``--memory-jobs`` jobs (100-byte bodies, pipelined); the growth of
   ``used_memory`` (INFO memory) and of ``used_memory_rss`` per job.  A
   node's ``used_memory`` is its own estimate (a fixed charge per job plus
   the body, ``disque/core/memory.py``): the same for every variant by
   construction, printed to show that; RSS is what the process really
   holds.  Beside them a fresh redis-server per round with as many 100-byte
   values LPUSHed in one list (its ``used_memory`` is its allocator's count).
   With them, the server's CPU per job while filling (pipelined, a fresh
   process: on PyPy the JIT's warm-up is in it).

Every server started is stopped at the end, whatever happens.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # tests.support
sys.path.insert(0, HERE)

from run import cpu_seconds, info_field, measured, start_redis  # noqa: E402
from tests.support.process import Client, NodeProcess  # noqa: E402

BODY = b"x" * 100
ALL_OPTIONS = ("BACKOFF", "EXP", "100", "10000", "MAXDELIVERIES", "5")

# ADDJOB variants: (label, options after "ADDJOB q body 0")
ADDJOB_VARIANTS = (
    ("plain", ()),
    ("PRIORITY 7", ("PRIORITY", "7")),
    ("PRIORITY 7 BACKOFF EXP 100 10000 MAXDELIVERIES 5", ("PRIORITY", "7") + ALL_OPTIONS),
)


def _mixed(*extra):
    """Options of the i-th job: priorities 1..9 in turn, plus ``extra``."""
    return lambda i: ("PRIORITY", str(i % 9 + 1)) + extra


# Queue contents for the consume cycles and the memory figures: (label,
# function of the job's index giving its options; None: plain).
CONSUME_VARIANTS = (
    ("plain jobs", None),
    ("priorities 1..9 mixed", _mixed()),
    ("priorities 1..9 mixed, BACKOFF EXP 100 10000, MAXDELIVERIES 5", _mixed(*ALL_OPTIONS)),
)
MEMORY_VARIANTS = (
    ("plain", None),
    ("PRIORITY 7", lambda i: ("PRIORITY", "7")),
    ("priorities 1..9 mixed", _mixed()),
    ("PRIORITY 7 BACKOFF EXP 100 10000 MAXDELIVERIES 5", lambda i: ("PRIORITY", "7") + ALL_OPTIONS),
)


def rotated(items, r):
    """``items`` starting at index ``r`` (mod its length): each round
    starts with another variant, so a drift of the machine's load does not
    always hit the same one."""
    k = r % len(items)
    return list(items[k:]) + list(items[:k])


def flush(port):
    c = Client(port, timeout=120)
    assert c.call("DEBUG", "FLUSHALL") == b"OK"
    c.close()


def fill(port, queue, n, options=None, batch=1000):
    """ADDJOB ``n`` jobs to ``queue``, pipelined; ``options(i)``: the i-th
    job's extension options (None: plain jobs).  Returns jobs/s."""
    if options is None:
        templates = [Client.encode("ADDJOB", queue, BODY, "0")]
    else:  # the options repeat with a period of at most 9 jobs
        templates = [Client.encode("ADDJOB", queue, BODY, "0", *options(i)) for i in range(9)]
    c = Client(port, timeout=120)
    t = time.perf_counter()
    done = 0
    while done < n:
        k = min(batch, n - done)
        c.send(b"".join(templates[(done + i) % len(templates)] for i in range(k)))
        for _ in range(k):
            reply = c.read()
            if isinstance(reply, Exception):
                raise reply
        done += k
    rate = n / (time.perf_counter() - t)
    c.close()
    return rate


def cycles(port, pid, n, depth, take, finish, value):
    """``n`` cycles on one connection, ``depth`` at a time: ``depth``
    ``take`` requests pipelined, then one ``finish(v)`` request per reply
    (``v = value(reply)``).  Returns (cycles/s, us per cycle, server CPU us
    per cycle).  A reply ``value`` maps to None (an empty queue) is not a
    cycle; the loop takes again."""
    c = Client(port, timeout=120)
    takes = take * depth
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    done = 0
    while done < n:
        k = min(depth, n - done)
        c.send(takes if k == depth else take * k)
        values = []
        for _ in range(k):
            v = value(c.read())
            if v is not None:
                values.append(v)
        if values:
            c.send(b"".join(finish(v) for v in values))
            for _ in values:
                c.read()
        done += len(values)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    c.close()
    return n / elapsed, elapsed / n * 1e6, cpu / n * 1e6


def job_id(reply):
    return reply[0][1] if reply else None


def getjob_cycle(node, queue, n, depth, finish):
    return cycles(node.port, node.proc.pid, n, depth, Client.encode("GETJOB", "NOHANG", "FROM", queue),
                  finish, job_id)


def ack(job):
    return Client.encode("ACKJOB", job)


def nack(job):
    return Client.encode("NACK", job)


def nack_delay_1(job):
    return Client.encode("NACK", job, "DELAY", "1")


def redis_ack_cycle(redis, n, depth):
    """Redis' reliable-queue cycle over a list of ``n`` values: RPOPLPUSH
    into a processing list, then LREM of the value from it."""
    c = Client(redis.port, timeout=120)
    c.call("DEL", "rq", "rproc")
    c.close()
    redis_fill(redis.port, "rq", n)
    return cycles(redis.port, redis.proc.pid, n, depth, Client.encode("RPOPLPUSH", "rq", "rproc"),
                  lambda v: Client.encode("LREM", "rproc", "1", v), lambda v: v)


def redis_return_cycle(redis, pool, n, depth):
    """The counterpart of GETJOB + NACK: RPOPLPUSH into a processing
    list, then RPOPLPUSH back to the queue."""
    c = Client(redis.port, timeout=120)
    c.call("DEL", "nq", "nproc")
    c.close()
    redis_fill(redis.port, "nq", pool)
    back = Client.encode("RPOPLPUSH", "nproc", "nq")
    return cycles(redis.port, redis.proc.pid, n, depth, Client.encode("RPOPLPUSH", "nq", "nproc"),
                  lambda v: back, lambda v: v)


def redis_fill(port, key, n, batch=1000):
    c = Client(port, timeout=120)
    t = time.perf_counter()
    cmd = Client.encode("LPUSH", key, BODY)
    for done in range(0, n, batch):
        k = min(batch, n - done)
        c.send(cmd * k)
        for _ in range(k):
            c.read()
    rate = n / (time.perf_counter() - t)
    c.close()
    return rate


# -- the three parts -------------------------------------------------------------------

def addjob_part(node, redis, args):
    """{label: [(rps, p50, cpu), ...]} for the ADDJOB variants and
    redis-server LPUSH."""
    n, w = args.requests, args.warmup
    runs = {label: [] for label, _ in ADDJOB_VARIANTS}
    runs["LPUSH"] = []
    for label, opts in ADDJOB_VARIANTS:  # warm up (PyPy's JIT), unmeasured
        measured(node, w, "ADDJOB", "warm", BODY, "0", *opts)
    measured(redis, w, "LPUSH", "warm", BODY)
    for r in range(args.rounds):
        for label, opts in rotated(ADDJOB_VARIANTS, r):
            flush(node.port)
            runs[label].append(measured(node, n, "ADDJOB", "q", BODY, "0", *opts))
        c = Client(redis.port)
        c.call("DEL", "l", "warm")
        c.close()
        runs["LPUSH"].append(measured(redis, n, "LPUSH", "l", BODY))
    return runs


def consume_part(node, redis, args):
    """{label: [(cycles/s, us per cycle, server CPU us per cycle), ...]}."""
    n, depth, pool = args.consume_jobs, args.depth, args.nack_pool
    runs = {}

    def ack_run(label, options, jobs):
        flush(node.port)
        fill(node.port, "cq", jobs, options)
        return getjob_cycle(node, "cq", jobs, depth, ack)

    def nack_run(finish, jobs):
        flush(node.port)
        fill(node.port, "nq", pool)
        return getjob_cycle(node, "nq", jobs, depth, finish)

    tests = [("GETJOB + ACKJOB, " + label, lambda label=label, options=options, k=None: ack_run(label, options, k or n))
             for label, options in CONSUME_VARIANTS]
    tests += [("GETJOB + NACK (queued again at once), plain jobs", lambda k=None: nack_run(nack, k or n)),
              ("GETJOB + NACK ... DELAY 1 (queued again 1 ms later), plain jobs",
               lambda k=None: nack_run(nack_delay_1, k or n))]
    for _, test in tests:  # warm up, unmeasured
        test(args.warmup)
    redis_ack_cycle(redis, args.warmup, depth)
    redis_return_cycle(redis, pool, args.warmup, depth)
    redis_tests = [("redis-server RPOPLPUSH + LREM", lambda: redis_ack_cycle(redis, n, depth)),
                   ("redis-server RPOPLPUSH + RPOPLPUSH back", lambda: redis_return_cycle(redis, pool, n, depth))]
    for label, _ in tests + redis_tests:
        runs[label] = []
    for r in range(args.rounds):
        for label, test in rotated(tests, r):
            runs[label].append(test())
        for label, test in redis_tests:
            runs[label].append(test())
    flush(node.port)
    return runs, [label for label, _ in redis_tests] + [label for label, _ in tests]


def memory_part(workdir, twistd, args):
    """{label: [(used_memory bytes/job, RSS bytes/job, server CPU us/job
    while filling), ...]}, a fresh server for each figure."""
    n = args.memory_jobs
    runs = {label: [] for label, _ in MEMORY_VARIANTS}
    runs["redis-server LPUSH"] = []
    count = 0
    for r in range(args.rounds):
        for label, options in rotated(MEMORY_VARIANTS, r):
            count += 1
            node = NodeProcess(os.path.join(workdir, "mem%d" % count), twistd=twistd).start()
            try:
                used0 = info_field(node.port, "memory", "used_memory")
                rss0 = info_field(node.port, "memory", "used_memory_rss")
                cpu0 = cpu_seconds(node.proc.pid)
                fill(node.port, "mq", n, options)
                cpu = (cpu_seconds(node.proc.pid) - cpu0) / n * 1e6
                time.sleep(2)  # the fill's last garbage collected
                used1 = info_field(node.port, "memory", "used_memory")
                rss1 = info_field(node.port, "memory", "used_memory_rss")
                jobs = info_field(node.port, "jobs", "registered_jobs")
                assert jobs == n, (label, jobs, n)
            finally:
                node.stop()
            runs[label].append(((used1 - used0) / n, (rss1 - rss0) / n, cpu))
        proc, port = start_redis()
        try:
            used0 = info_field(port, "memory", "used_memory")
            rss0 = info_field(port, "memory", "used_memory_rss")
            cpu0 = cpu_seconds(proc.pid)
            redis_fill(port, "ml", n)
            cpu = (cpu_seconds(proc.pid) - cpu0) / n * 1e6
            time.sleep(1)
            used1 = info_field(port, "memory", "used_memory")
            rss1 = info_field(port, "memory", "used_memory_rss")
        finally:
            proc.kill()
            proc.wait()
        runs["redis-server LPUSH"].append(((used1 - used0) / n, (rss1 - rss0) / n, cpu))
    return runs


# -- the report ------------------------------------------------------------------------

def med(runs, k):
    return statistics.median(run[k] for run in runs)


def spread(runs, k, fmt="%.1f"):
    """The median of field ``k`` with its range over the rounds."""
    values = [run[k] for run in runs]
    if len(values) == 1:
        return fmt % values[0]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values), max(values))


def report_addjob(runs, args):
    redis = runs["LPUSH"]
    plain = runs["plain"]
    print("#### ADDJOB, 50 clients, unpipelined, 100-byte bodies (redis-benchmark, median of %d rounds)\n"
          % args.rounds)
    print("| command | ops/s | x redis-server LPUSH | p50 ms | server CPU us/op (range) | CPU x plain ADDJOB |")
    print("|---|---:|---:|---:|---:|---:|")
    print("| redis-server LPUSH | %.0f | 1 | %.3f | %s | - |" % (med(redis, 0), med(redis, 1), spread(redis, 2)))
    for label, _ in ADDJOB_VARIANTS:
        r = runs[label]
        print("| ADDJOB %s | %.0f | %.2f | %.3f | %s | %.2f |" % (
            label, med(r, 0), med(r, 0) / med(redis, 0), med(r, 1), spread(r, 2), med(r, 2) / med(plain, 2)))
    print()


def report_consume(runs, order, args):
    print("#### Consume cycles, 1 client, windows of %d jobs pipelined (%d jobs, median of %d rounds)\n"
          % (args.depth, args.consume_jobs, args.rounds))
    print("| cycle, per job | jobs/s | x redis-server | us per job | server CPU us/job (range) | CPU x redis-server "
          "| CPU x first row |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    redis_ack, redis_back = runs[order[0]], runs[order[1]]
    firsts = {}
    for label in order:
        r = runs[label]
        if label.startswith("redis-server"):
            print("| %s | %.0f | 1 | %.1f | %s | 1 | - |" % (label, med(r, 0), med(r, 1), spread(r, 2)))
            continue
        kind = "NACK" if "NACK" in label else "ACKJOB"
        ref = redis_back if kind == "NACK" else redis_ack
        first = firsts.setdefault(kind, r)
        print("| %s | %.0f | %.2f | %.1f | %s | %.2f | %.2f |" % (
            label, med(r, 0), med(r, 0) / med(ref, 0), med(r, 1), spread(r, 2), med(r, 2) / med(ref, 2),
            med(r, 2) / med(first, 2)))
    print()


def report_memory(runs, args):
    redis = runs["redis-server LPUSH"]
    print("#### Memory, %d jobs with 100-byte bodies, a fresh server each (median of %d rounds)\n"
          % (args.memory_jobs, args.rounds))
    print("| jobs | used_memory growth, bytes/job | RSS growth, bytes/job (range) | RSS x redis-server | "
          "server CPU us/job while filling |")
    print("|---|---:|---:|---:|---:|")
    print("| redis-server, LPUSH of 100-byte values | %.0f | %s | 1 | %.1f |" % (
        med(redis, 0), spread(redis, 1, "%.0f"), med(redis, 2)))
    for label, _ in MEMORY_VARIANTS:
        r = runs[label]
        print("| %s | %.0f | %s | %.2f | %.1f |" % (label, med(r, 0), spread(r, 1, "%.0f"),
                                                  med(r, 1) / med(redis, 1), med(r, 2)))
    print()


def runtime_name(twistd):
    python = os.path.join(os.path.dirname(twistd), "python")
    try:
        out = subprocess.run([python, "-c", "import platform; print(platform.python_implementation(), "
                                            "platform.python_version())"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        out = ""
    return out or twistd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--twistd", default=os.path.join(ROOT, ".venv", "bin", "twistd"),
                    help="the node's twistd (default: .venv/bin/twistd; .venv-pypy/bin/twistd for PyPy)")
    ap.add_argument("--requests", type=int, default=100000, help="ADDJOBs per run")
    ap.add_argument("--warmup", type=int, default=20000, help="unmeasured requests or cycles before each figure")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--consume-jobs", type=int, default=50000, help="cycles per consume run")
    ap.add_argument("--depth", type=int, default=50, help="jobs per pipelined window of the consume cycles")
    ap.add_argument("--nack-pool", type=int, default=10000, help="jobs in the queue of the NACK cycles")
    ap.add_argument("--memory-jobs", type=int, default=200000)
    ap.add_argument("--skip-addjob", action="store_true")
    ap.add_argument("--skip-consume", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    args = ap.parse_args()
    twistd = os.path.abspath(args.twistd)
    if not os.path.exists(twistd):
        sys.exit("no twistd at %s" % twistd)
    redis_proc, redis_port = start_redis()
    if not redis_port:
        sys.exit("redis-server not found: apt-get install redis-server (the calibration)")
    redis = SimpleNamespace(port=redis_port, proc=redis_proc)
    workdir = tempfile.mkdtemp(prefix="disque-ext-bench-")
    started = time.time()
    addjob_runs = consume_runs = memory_runs = None
    try:
        if not (args.skip_addjob and args.skip_consume):
            node = NodeProcess(os.path.join(workdir, "node"), twistd=twistd).start()
            try:
                if not args.skip_addjob:
                    addjob_runs = addjob_part(node, redis, args)
                if not args.skip_consume:
                    consume_runs = consume_part(node, redis, args)
            finally:
                node.stop()
        if not args.skip_memory:
            memory_runs = memory_part(workdir, twistd, args)
    finally:
        redis_proc.kill()
        redis_proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    print("### %s (%s), %d rounds, %.0f s\n" % (runtime_name(twistd), os.path.relpath(twistd, ROOT), args.rounds,
                                               time.time() - started))
    if addjob_runs:
        report_addjob(addjob_runs, args)
    if consume_runs:
        report_consume(*consume_runs, args)
    if memory_runs:
        report_memory(memory_runs, args)


if __name__ == "__main__":
    main()
