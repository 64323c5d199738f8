"""Benchmark a disque node against redis-server on this machine.

Usage::

    .venv/bin/python benchmarks/run.py [--requests 100000] [--memory-jobs 1000000]
                                      [--rounds 3] [--skip-memory] [--skip-cluster] [--skip-aof]

Starts a real ``twistd -n disque`` node and a ``redis-server`` (the
calibration: same machine, same benchmark tool), both on free 127.0.0.1
ports, and runs ``redis-benchmark`` (from redis-tools) against them:

* redis-server PING and LPUSH, disque PING        (calibration)
* ADDJOB, 50 clients, unpipelined and ``-P 16``
* GETJOB NOHANG, 50 clients (the queue is filled first)
* a full ADDJOB + GETJOB + ACKJOB cycle from one pipelined Python client
* a 3-node cluster (chain of MEETs): ADDJOB with the default REPLICATE 3,
  50 clients unpipelined and ``-P 16``, and REPLICATE 1 for comparison;
  federation: jobs produced on one node and consumed on another, jobs/s
  and delivery latency p50/p99, flat out and at 500 jobs/s

and the memory per job: RSS growth of a fresh node after adding
``--memory-jobs`` jobs with 100-byte bodies, divided by the job count.

Both servers are stopped at the end, whatever happens.  The numbers depend
on the machine: compare ratios (ADDJOB vs the node's own PING), not rates.
"""

import argparse
import csv
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from support import Client, NodeProcess, free_port, start_cluster  # noqa: E402


def redis_benchmark(port, clients, requests, *command, pipeline=1, keyspace=0):
    """``keyspace``: replace ``__rand_int__`` in the command with random
    numbers below it (redis-benchmark -r)."""
    exe = shutil.which("redis-benchmark")
    if not exe:
        sys.exit("redis-benchmark not found: apt-get install redis-tools")
    args = [exe, "-p", str(port), "-c", str(clients), "-n", str(requests), "-P", str(pipeline), "--csv"]
    if keyspace:
        args += ["-r", str(keyspace)]
    if command and command[0].startswith("-t"):
        args += list(command)
    else:
        args += list(command)
    out = subprocess.run(args, capture_output=True, text=True, timeout=600).stdout
    rows = list(csv.reader(io.StringIO(out)))
    for row in rows[1:]:
        if len(row) >= 2:
            return float(row[1]), float(row[4])  # rps, p50 ms
    raise RuntimeError("no result from redis-benchmark %s: %r" % (command, out))


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def measured(node, n, *command, pipeline=1, keyspace=0):
    """redis_benchmark against ``node`` plus the node's CPU microseconds per
    request: less sensitive than the rate to a busy neighbour on the host."""
    before = cpu_seconds(node.proc.pid)
    rps, p50 = redis_benchmark(node.port, 50, n, *command, pipeline=pipeline, keyspace=keyspace)
    return rps, p50, (cpu_seconds(node.proc.pid) - before) / n * 1e6


def median(runs):
    """The (rps, p50) run with the median rate."""
    return sorted(runs)[len(runs) // 2]


def start_redis():
    exe = shutil.which("redis-server")
    if not exe:
        return None, None
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    return None, None


def fill(port, queue, n, body=b"x" * 100, batch=1000):
    c = Client(port, timeout=120)
    cmd = Client.encode("ADDJOB", queue, body, "0")
    done = 0
    while done < n:
        k = min(batch, n - done)
        c.send(cmd * k)
        for _ in range(k):
            c.read()
        done += k
    c.close()


def cycle(port, n, batch=100):
    """ADDJOB + GETJOB + ACKJOB for ``n`` jobs, ``batch`` at a time, one
    pipelined connection; returns full cycles per second."""
    c = Client(port, timeout=120)
    add = Client.encode("ADDJOB", "cycleq", "x" * 100, "0")
    get = Client.encode("GETJOB", "NOHANG", "COUNT", str(batch), "FROM", "cycleq")
    start = time.perf_counter()
    done = 0
    while done < n:
        c.send(add * batch + get)
        for _ in range(batch):
            c.read()
        jobs = c.read()
        ids = [j[1] for j in jobs]
        c.send(Client.encode("ACKJOB", *ids))
        assert c.read() == len(ids)
        done += batch
    elapsed = time.perf_counter() - start
    c.close()
    return n / elapsed


def _consume(port, n, out, done):
    """The federation consumer, in its own process (a thread would share
    the producer's GIL and add its switch interval to every round trip)."""
    c = Client(port, timeout=60)
    got = 0
    latencies = []
    idle_since = None
    while got < n:
        reply = c.call("GETJOB", "TIMEOUT", "1000", "COUNT", "100", "FROM", "fedq")
        if not reply:
            # A cold queue may wait for the next NEEDJOBS broadcast (2 s,
            # then 4 s ...): give up only after 10 s of nothing.
            idle_since = idle_since or time.time()
            if done.is_set() and time.time() - idle_since > 10:
                break
            continue
        idle_since = None
        now = time.time()
        latencies.extend(now - float(job[2]) for job in reply)
        got += len(reply)
    c.close()
    out.put(latencies)


def federation(producer_node, consumer_node, n, rate=None):
    """Jobs produced on one node (one client, at-most-once jobs carrying
    their send time) and consumed on another (one client in another
    process, GETJOB COUNT 100): (jobs/s end to end, p50 ms, p99 ms) of the
    delivery latency."""
    import multiprocessing

    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    done = mp.Event()
    consumer = mp.Process(target=_consume, args=(consumer_node.port, n, out, done))
    consumer.start()
    p = Client(producer_node.port, timeout=60)
    start = time.time()
    batch = 50
    for i in range(0, n, batch):
        k = min(batch, n - i)
        stamp = "%.6f" % time.time()
        p.send(Client.encode("ADDJOB", "fedq", stamp, "0", "REPLICATE", "1", "RETRY", "0") * k)
        for _ in range(k):
            p.read()
        if rate:
            time.sleep(k / rate)
    done.set()
    try:
        latencies = out.get(timeout=120)
    except Exception:
        latencies = []
    elapsed = time.time() - start
    consumer.join(10)
    if consumer.is_alive():
        consumer.kill()
    p.close()
    latencies.sort()
    if not latencies:
        return 0.0, float("nan"), float("nan")
    return (len(latencies) / elapsed, latencies[len(latencies) // 2] * 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000)


def aof_figures(workdir, n, load_jobs):
    """ADDJOB (50 clients) with appendonly no / appendfsync everysec /
    always, and how long a node takes to start from an AOF of
    ``load_jobs`` jobs."""
    rows = []
    for label, args in (("appendonly no", ()),
                        ("appendfsync everysec", ("--appendonly", "yes", "--set", "appendfsync=everysec")),
                        ("appendfsync always", ("--appendonly", "yes", "--set", "appendfsync=always"))):
        node = NodeProcess(os.path.join(workdir, "aof-" + label.split()[-1]), args=args).start()
        try:
            rows.append(("ADDJOB, 50 clients, " + label, *measured(node, n, "ADDJOB", "q", "x" * 100, "0")))
        finally:
            node.stop()
    load = None
    if load_jobs:
        node = NodeProcess(os.path.join(workdir, "aof-load"),
                           args=("--appendonly", "yes", "--set", "appendfsync=no")).start()
        try:
            fill(node.port, "lq", load_jobs)
        finally:
            node.stop()
        size = os.path.getsize(os.path.join(node.workdir, "disque.aof"))
        t = time.perf_counter()
        node.start(wait=False)
        node.wait_ready(timeout=600)  # ready = loaded: the file is read before the node listens
        seconds = time.perf_counter() - t
        jobs = info_field(node.port, "jobs", "registered_jobs")
        node.stop()
        assert jobs == load_jobs, (jobs, load_jobs)
        load = (load_jobs, size, seconds)
    return rows, load


def info_field(port, section, field):
    c = Client(port)
    text = c.call("INFO", section).decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise KeyError(field)


def memory_per_job(workdir, n):
    node = NodeProcess(os.path.join(workdir, "mem")).start()
    try:
        before = info_field(node.port, "memory", "used_memory_rss")
        t = time.perf_counter()
        fill(node.port, "memq", n)
        rate = n / (time.perf_counter() - t)
        after = info_field(node.port, "memory", "used_memory_rss")
        jobs = info_field(node.port, "jobs", "registered_jobs")
        assert jobs == n, (jobs, n)
        return (after - before) / n, rate
    finally:
        node.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--memory-jobs", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved PING/ADDJOB rounds")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-cluster", action="store_true", help="no 3-node replication benchmark")
    ap.add_argument("--skip-aof", action="store_true", help="no AOF figures")
    ap.add_argument("--aof-load-jobs", type=int, default=1000000, help="jobs in the AOF load test (0: skip)")
    args = ap.parse_args()
    n = args.requests
    results = []
    workdir = tempfile.mkdtemp(prefix="disque-bench-")
    redis_proc, redis_port = start_redis()
    node = NodeProcess(os.path.join(workdir, "node")).start()
    try:
        if redis_port:
            results.append(("redis-server PING, 50 clients", *redis_benchmark(redis_port, 50, n, "PING"), None))
            results.append(("redis-server LPUSH, 50 clients", *redis_benchmark(redis_port, 50, n, "LPUSH", "l", "x"),
                            None))
        # The ratio the target is about: PING and ADDJOB interleaved, median
        # of --rounds runs each, so one noisy run cannot decide it.
        pings, adds = [], []
        for _ in range(args.rounds):
            pings.append(measured(node, n, "PING"))
            adds.append(measured(node, n, "ADDJOB", "q", "x" * 100, "0"))
        ping, add = median(pings), median(adds)
        ratios = [a[0] / p[0] for p, a in zip(pings, adds)]
        results.append(("disque PING, 50 clients (median of %d)" % args.rounds, *ping))
        results.append(("disque ADDJOB, 50 clients (median of %d)" % args.rounds, *add))
        addp = measured(node, n * 4, "ADDJOB", "qp", "x" * 100, "0", pipeline=16)
        results.append(("disque ADDJOB, 50 clients, -P 16", *addp))
        results.append(("disque ADDJOB DEDUP, a new 32-byte key each, 50 clients",
                        *measured(node, n, "ADDJOB", "qk", "x" * 100, "0", "DEDUP",
                                  "key:%s:__rand_int__" % ("k" * 16), keyspace=10 ** 12)))
        results.append(("disque ADDJOB DEDUP, the same key (answered from the index), 50 clients",
                        *measured(node, n, "ADDJOB", "qk1", "x" * 100, "0", "DEDUP", "one-key")))
        fill(node.port, "gq", n)
        get = measured(node, n, "GETJOB", "NOHANG", "FROM", "gq")
        results.append(("disque GETJOB NOHANG, 50 clients", *get))
        cyc = cycle(node.port, n)
        results.append(("disque ADDJOB+GETJOB+ACKJOB cycle, 1 pipelined client", cyc, float("nan"), None))
    finally:
        node.stop()
        if redis_proc:
            redis_proc.kill()
            redis_proc.wait()
    federation_rows = []
    if not args.skip_cluster:
        nodes = start_cluster(os.path.join(workdir, "cluster"), 3)
        try:
            results.append(("3-node cluster ADDJOB (REPLICATE 3), 50 clients",
                            *measured(nodes[0], n, "ADDJOB", "cq", "x" * 100, "0")))
            results.append(("3-node cluster ADDJOB (REPLICATE 3), 50 clients, -P 16",
                            *measured(nodes[0], n * 2, "ADDJOB", "cqp", "x" * 100, "0", pipeline=16)))
            results.append(("3-node cluster ADDJOB REPLICATE 1, 50 clients",
                            *measured(nodes[0], n, "ADDJOB", "c1", "x" * 100, "0", "REPLICATE", "1")))
            fed = federation(nodes[0], nodes[1], max(n // 5, 1000))
            federation_rows.append(("produce on A, consume on B, flat out", *fed))
            fed = federation(nodes[0], nodes[1], 2000, rate=500)
            federation_rows.append(("produce on A at 500 jobs/s, consume on B", *fed))
        finally:
            for node in nodes:
                node.stop()
    aof_rows, aof_load = [], None
    if not args.skip_aof:
        aof_rows, aof_load = aof_figures(workdir, n, args.aof_load_jobs)
        results.extend(aof_rows)
    mem = None
    if not args.skip_memory:
        mem = memory_per_job(workdir, args.memory_jobs)
    shutil.rmtree(workdir, ignore_errors=True)

    print("| benchmark | ops/s | p50 ms | node CPU us/op |")
    print("|---|---:|---:|---:|")
    for name, rps, p50, cpu in results:
        print("| %s | %.0f | %s | %s |" % (name, rps, "-" if p50 != p50 else "%.3f" % p50,
                                         "-" if cpu is None else "%.1f" % cpu))
    if federation_rows:
        print()
        print("| federation (3-node cluster, default policy) | jobs/s | latency p50 ms | p99 ms |")
        print("|---|---:|---:|---:|")
        for name, rps, p50, p99 in federation_rows:
            print("| %s | %.0f | %.1f | %.1f |" % (name, rps, p50, p99))
    print()
    print("ADDJOB / disque PING (unpipelined): %.2f (per round: %s)"
          % (add[0] / ping[0], ", ".join("%.2f" % r for r in ratios)))
    print("node CPU per PING / per ADDJOB (the same ratio, in CPU time): %.2f" % (ping[2] / add[2]))
    if redis_port:
        print("disque PING / redis-server PING: %.2f" % (ping[0] / results[0][1]))
        print("disque ADDJOB / redis-server LPUSH: %.2f" % (add[0] / results[1][1]))
    if aof_load:
        jobs, size, seconds = aof_load
        print("AOF load: %d jobs (%.0f MB file) in %.1f s, %.0f jobs/s (start-up included)"
              % (jobs, size / 1e6, seconds, jobs / seconds))
    if mem:
        print("memory: %.0f bytes per job (%d jobs, 100-byte bodies; loaded at %.0f jobs/s)"
              % (mem[0], args.memory_jobs, mem[1]))


if __name__ == "__main__":
    main()
