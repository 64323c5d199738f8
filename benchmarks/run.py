"""Benchmark disque nodes against redis-server on this machine, on every
runtime at hand (CPython in ``.venv``, PyPy in ``.venv-pypy``).

Usage::

    .venv/bin/python benchmarks/run.py [--runtimes cpython,pypy] [--requests 100000]
        [--memory-jobs 1000000] [--rounds 3] [--skip-memory] [--skip-cluster] [--skip-aof]

The machine is shared and noisy, so no figure stands alone: before each
runtime's figures a ``redis-server`` (the calibration; same machine, same
``redis-benchmark``) is measured for PING, LPUSH, RPOP and LPUSH -P 16, and
every figure is printed as a ratio to its counterpart, with the node's CPU
time per request (less sensitive to a busy neighbour than the rate).  Each
node is warmed up first (PyPy's JIT compiles the hot paths in the first
seconds; a server's steady state is what clients see).

Per runtime:

* PING; ADDJOB, 50 clients, unpipelined (median of ``--rounds``) and -P 16;
  ADDJOB DEDUP; GETJOB NOHANG (the queue filled first); a full
  ADDJOB + GETJOB + ACKJOB cycle from one pipelined client
* a 3-node cluster (chain of MEETs): ADDJOB REPLICATE 3 unpipelined and
  -P 16, REPLICATE 1; federation (jobs produced on one node, consumed on
  another: jobs/s and delivery latency p50/p99)
* ADDJOB with the AOF (everysec, always) and the time to load a large AOF
* memory per job (RSS growth over ``--memory-jobs`` jobs with 100-byte
  bodies; redis-server's per element of a list of the same values beside
  it) and the CPU an idle node holding them uses

then the targets of ``docs/benchmarks.md`` with their verdicts.  Every
server started is stopped at the end, whatever happens.
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
sys.path.insert(0, ROOT)  # tests.support

from tests.support.process import Client, NodeProcess, free_port, start_cluster  # noqa: E402


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


def measured(node, n, *command, pipeline=1, keyspace=0, warmup=0):
    """redis_benchmark against ``node`` plus the node's CPU microseconds per
    request: less sensitive than the rate to a busy neighbour on the host.
    ``warmup`` requests of the same command go first, unmeasured."""
    if warmup:
        redis_benchmark(node.port, 50, warmup, *command, pipeline=pipeline, keyspace=keyspace)
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


def aof_figures(workdir, n, load_jobs, twistd, warmup):
    """ADDJOB (50 clients) with appendfsync everysec / always, and how long
    a node takes to start from an AOF of ``load_jobs`` jobs."""
    rows = []
    for key, args in (("everysec", ("--appendonly", "yes", "--set", "appendfsync=everysec")),
                      ("always", ("--appendonly", "yes", "--set", "appendfsync=always"))):
        node = NodeProcess(os.path.join(workdir, "aof-" + key), args=args, twistd=twistd).start()
        try:
            rows.append(("aof_" + key, "ADDJOB, 50 clients, appendfsync " + key,
                         *measured(node, n, "ADDJOB", "q", "x" * 100, "0", warmup=warmup), "LPUSH"))
        finally:
            node.stop()
    load = None
    if load_jobs:
        node = NodeProcess(os.path.join(workdir, "aof-load"), twistd=twistd,
                           args=("--appendonly", "yes", "--set", "appendfsync=no")).start()
        try:
            fill(node.port, "lq", load_jobs)
        finally:
            node.stop()
        size = os.path.getsize(os.path.join(node.workdir, "disque.aof"))
        t = time.perf_counter()
        node.start(wait=False)
        node.wait_ready(timeout=600)  # ready = loaded: PING answers -LOADING until then
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


def memory_per_job(workdir, n, twistd, idle_seconds=10.0):
    """(bytes of RSS per job, jobs/s while filling, % of a core used by the
    node idle with the jobs) for ``n`` jobs with 100-byte bodies."""
    node = NodeProcess(os.path.join(workdir, "mem"), twistd=twistd).start()
    try:
        before = info_field(node.port, "memory", "used_memory_rss")
        t = time.perf_counter()
        fill(node.port, "memq", n)
        rate = n / (time.perf_counter() - t)
        time.sleep(2)  # the fill's last garbage collected
        after = info_field(node.port, "memory", "used_memory_rss")
        jobs = info_field(node.port, "jobs", "registered_jobs")
        assert jobs == n, (jobs, n)
        return (after - before) / n, rate, idle_cpu(node.proc.pid, idle_seconds)
    finally:
        node.stop()


def idle_cpu(pid, seconds):
    """Percent of one core process ``pid`` uses over ``seconds`` of idleness."""
    cpu, t = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu) / (time.perf_counter() - t) * 100


def redis_memory(port, n):
    """(bytes of RSS per element of a list of ``n`` 100-byte values, % of a
    core redis-server uses idle holding them)."""
    before = info_field(port, "memory", "used_memory_rss")
    c = Client(port, timeout=120)
    cmd = Client.encode("LPUSH", "memlist", "x" * 100)
    for done in range(0, n, 1000):
        k = min(1000, n - done)
        c.send(cmd * k)
        for _ in range(k):
            c.read()
    time.sleep(1)
    after = info_field(port, "memory", "used_memory_rss")
    idle = idle_cpu(info_field(port, "server", "process_id"), 5.0)
    c.call("DEL", "memlist")
    c.close()
    return (after - before) / n, idle


# runtime -> its virtualenv, relative to the checkout
RUNTIMES = {"cpython": ".venv", "pypy": ".venv-pypy"}

# What each figure is compared to: the redis-server figure of the same shape.
CALIBRATION = ("PING", "LPUSH", "RPOP", "LPUSH -P 16")


def runtime_twistd(name):
    path = os.path.join(ROOT, RUNTIMES[name], "bin", "twistd")
    return path if os.path.exists(path) else None


def calibrate(port, n):
    """redis-server's PING, LPUSH, RPOP (popping what LPUSH pushed) and
    LPUSH -P 16, 50 clients, 100-byte values: {name: (rps, p50)}."""
    c = Client(port)
    c.call("DEL", "l", "lp")
    c.close()
    return {"PING": redis_benchmark(port, 50, n, "PING"),
            "LPUSH": redis_benchmark(port, 50, n, "LPUSH", "l", "x" * 100),
            "RPOP": redis_benchmark(port, 50, n, "RPOP", "l"),
            "LPUSH -P 16": redis_benchmark(port, 50, n * 4, "LPUSH", "lp", "x" * 100, pipeline=16)}


def single_node(workdir, args, twistd):
    """The single-node rows: (key, label, rps, p50, CPU us/op, reference)."""
    n, w = args.requests, args.warmup
    rows = []
    node = NodeProcess(os.path.join(workdir, "node"), twistd=twistd).start()
    try:
        measured(node, w, "PING")
        measured(node, w, "ADDJOB", "warm", "x" * 100, "0")
        # PING and ADDJOB interleaved, the median of --rounds runs each, so
        # one noisy run cannot decide it.
        pings, adds = [], []
        for _ in range(args.rounds):
            pings.append(measured(node, n, "PING"))
            adds.append(measured(node, n, "ADDJOB", "q", "x" * 100, "0"))
        rows.append(("ping", "PING (median of %d)" % args.rounds, *median(pings), "PING"))
        rows.append(("addjob", "ADDJOB (median of %d)" % args.rounds, *median(adds), "LPUSH"))
        rows.append(("addjob_p16", "ADDJOB -P 16",
                     *measured(node, n * 4, "ADDJOB", "qp", "x" * 100, "0", pipeline=16, warmup=w), "LPUSH -P 16"))
        rows.append(("dedup_new", "ADDJOB DEDUP, a new 32-byte key each",
                     *measured(node, n, "ADDJOB", "qk", "x" * 100, "0", "DEDUP",
                               "key:%s:__rand_int__" % ("k" * 16), keyspace=10 ** 12, warmup=w), "LPUSH"))
        rows.append(("dedup_same", "ADDJOB DEDUP, the same key (answered from the index)",
                     *measured(node, n, "ADDJOB", "qk1", "x" * 100, "0", "DEDUP", "one-key", warmup=w), "LPUSH"))
        fill(node.port, "gq", n + w)
        rows.append(("getjob", "GETJOB NOHANG",
                     *measured(node, n, "GETJOB", "NOHANG", "FROM", "gq", warmup=w), "RPOP"))
        cycle(node.port, w)
        rows.append(("cycle", "ADDJOB+GETJOB+ACKJOB cycles, 1 pipelined client", cycle(node.port, n),
                     float("nan"), None, "LPUSH"))
    finally:
        node.stop()
    return rows


def cluster(workdir, args, twistd):
    """The 3-node rows, and the federation rows (label, jobs/s, p50, p99)."""
    n, w = args.requests, args.warmup
    rows, federation_rows = [], []
    nodes = start_cluster(os.path.join(workdir, "cluster"), 3, twistd=twistd)
    try:
        measured(nodes[0], w, "ADDJOB", "cwarm", "x" * 100, "0")
        rows.append(("r3", "3-node cluster ADDJOB (REPLICATE 3)",
                     *measured(nodes[0], n, "ADDJOB", "cq", "x" * 100, "0"), "LPUSH"))
        rows.append(("r3_p16", "3-node cluster ADDJOB (REPLICATE 3), -P 16",
                     *measured(nodes[0], n * 2, "ADDJOB", "cqp", "x" * 100, "0", pipeline=16, warmup=w), "LPUSH"))
        rows.append(("r1", "3-node cluster ADDJOB REPLICATE 1",
                     *measured(nodes[0], n, "ADDJOB", "c1", "x" * 100, "0", "REPLICATE", "1", warmup=w), "LPUSH"))
        federation_rows.append(("produce on A, consume on B, flat out",
                                *federation(nodes[0], nodes[1], max(n // 5, 1000))))
        federation_rows.append(("produce on A at 500 jobs/s, consume on B",
                                *federation(nodes[0], nodes[1], 2000, rate=500)))
    finally:
        for node in nodes:
            node.stop()
    return rows, federation_rows


def _ratio(key, ref=None):
    """A target's figure: the rate of row ``key`` over redis-server's
    ``ref`` (the row's own reference if None)."""
    def figure(result):
        row = result["rows"].get(key)
        if row is None:
            return None
        return row[2] / result["calibration"][ref or row[5]][0]
    return figure


def _per_addjob(result):
    cycle_row, add = result["rows"].get("cycle"), result["rows"].get("addjob")
    return cycle_row[2] / add[2] if cycle_row and add else None


# (runtimes, what, figure of a runtime's result, goal, True if higher is better)
TARGETS = (
    (("pypy",), "ADDJOB unpipelined / LPUSH", _ratio("addjob"), 0.8, True),
    (("pypy",), "GETJOB NOHANG / RPOP", _ratio("getjob"), 0.8, True),
    (("pypy",), "ADDJOB -P 16 / LPUSH -P 16", _ratio("addjob_p16"), 0.2, True),
    (("pypy",), "3-node REPLICATE 3 ADDJOB / LPUSH", _ratio("r3"), 0.35, True),
    (("pypy",), "3-node REPLICATE 3 ADDJOB -P 16 / LPUSH", _ratio("r3_p16", "LPUSH"), 0.5, True),
    (("pypy",), "add+get+ack cycles/s, 1 pipelined client / ADDJOB unpipelined", _per_addjob, 1.0, True),
    (("cpython",), "ADDJOB unpipelined / LPUSH", _ratio("addjob"), 0.55, True),
    (("cpython", "pypy"), "bytes per job (100-byte bodies)", lambda r: r.get("memory"), 600, False),
    (("cpython", "pypy"), "idle node holding the jobs, % of a core", lambda r: r.get("idle_cpu"), 2.0, False),
)


def run_runtime(name, twistd, args, redis_port):
    """Every figure of one runtime, calibrated just before: a dict."""
    workdir = tempfile.mkdtemp(prefix="disque-bench-%s-" % name)
    result = {"calibration": calibrate(redis_port, args.requests), "rows": {}, "federation": []}
    order = []
    try:
        rows = single_node(workdir, args, twistd)
        if not args.skip_cluster:
            cluster_rows, result["federation"] = cluster(workdir, args, twistd)
            rows += cluster_rows
        if not args.skip_aof:
            aof_rows, result["aof_load"] = aof_figures(workdir, args.requests, args.aof_load_jobs, twistd,
                                                       args.warmup)
            rows += aof_rows
        for row in rows:
            result["rows"][row[0]] = row
            order.append(row[0])
        if not args.skip_memory:
            result["memory"], result["fill_rate"], result["idle_cpu"] = memory_per_job(
                workdir, args.memory_jobs, twistd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["order"] = order
    return result


def report(results, redis_mem, args):
    for name, result in results.items():
        cal = result["calibration"]
        print("### %s\n" % name)
        print("| benchmark | ops/s | x redis-server | p50 ms | node CPU us/op |")
        print("|---|---:|---|---:|---:|")
        for ref in CALIBRATION:
            rps, p50 = cal[ref]
            print("| redis-server %s | %.0f | 1 | %.3f | - |" % (ref, rps, p50))
        for key in result["order"]:
            _, label, rps, p50, cpu, ref = result["rows"][key]
            print("| %s | %.0f | %.2f x %s | %s | %s |" % (
                label, rps, rps / cal[ref][0], ref, "-" if p50 != p50 else "%.3f" % p50,
                "-" if cpu is None else "%.1f" % cpu))
        if result["federation"]:
            print("\n| federation (3-node cluster, default policy) | jobs/s | latency p50 ms | p99 ms |")
            print("|---|---:|---:|---:|")
            for label, rps, p50, p99 in result["federation"]:
                print("| %s | %.0f | %.1f | %.1f |" % (label, rps, p50, p99))
        if result.get("aof_load"):
            jobs, size, seconds = result["aof_load"]
            print("\nAOF load: %d jobs (%.0f MB file) in %.1f s, %.0f jobs/s (start-up included)"
                  % (jobs, size / 1e6, seconds, jobs / seconds))
        if "memory" in result:
            print("\nmemory: %.0f bytes per job (%d jobs, 100-byte bodies; filled at %.0f jobs/s); "
                  "idle with them: %.2f%% of a core" % (result["memory"], args.memory_jobs,
                                                       result["fill_rate"], result["idle_cpu"]))
            if redis_mem:
                print("redis-server: %.0f bytes per list element of the same values; idle: %.2f%% of a core"
                      % redis_mem)
        print()
    print("### targets\n")
    print("| runtime | target | measured | goal | met |")
    print("|---|---|---:|---:|---|")
    for runtimes, what, figure, goal, higher in TARGETS:
        for name in runtimes:
            if name not in results:
                continue
            value = figure(results[name])
            if value is None:
                print("| %s | %s | not measured | %s %s | - |" % (name, what, ">=" if higher else "<=", goal))
                continue
            met = value >= goal if higher else value <= goal
            print("| %s | %s | %.2f | %s %s | %s |" % (name, what, value, ">=" if higher else "<=", goal,
                                                       "yes" if met else "**no**"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default=",".join(r for r in RUNTIMES if runtime_twistd(r)),
                    help="comma-separated: %s (default: those installed)" % ", ".join(RUNTIMES))
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--warmup", type=int, default=20000, help="unmeasured requests before each figure")
    ap.add_argument("--memory-jobs", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved PING/ADDJOB rounds")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-cluster", action="store_true", help="no 3-node replication benchmark")
    ap.add_argument("--skip-aof", action="store_true", help="no AOF figures")
    ap.add_argument("--aof-load-jobs", type=int, default=1000000, help="jobs in the AOF load test (0: skip)")
    args = ap.parse_args()
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    for name in runtimes:
        if name not in RUNTIMES or not runtime_twistd(name):
            sys.exit("runtime %r: no %s/bin/twistd (runtimes: %s)" % (name, RUNTIMES.get(name, "?"),
                                                                     ", ".join(RUNTIMES)))
    redis_proc, redis_port = start_redis()
    if not redis_port:
        sys.exit("redis-server not found: apt-get install redis-server (the calibration)")
    results, redis_mem = {}, None
    try:
        for name in runtimes:
            results[name] = run_runtime(name, runtime_twistd(name), args, redis_port)
        if not args.skip_memory:
            redis_mem = redis_memory(redis_port, args.memory_jobs)
    finally:
        redis_proc.kill()
        redis_proc.wait()
    report(results, redis_mem, args)


if __name__ == "__main__":
    main()
