"""Benchmark the Spark connector against the raw capacity of the same
3-node cluster, in one run.

Usage::

    .venv/bin/python benchmarks/spark_bench.py [--jobs 100000] [--body-size 100] [--master local[2]]
        [--twistd .venv-pypy/bin/twistd] [--partitions 2] [--max-jobs-per-trigger N]

Starts three real ``twistd -n disque`` nodes (``--twistd``: the nodes'
runtime, by default the PyPy venv's when there is one) on free 127.0.0.1
ports, joined in a full mesh (every ADDJOB is replicated to all three),
and a local SparkSession, then measures, in this order:

* **reference**: ``redis-benchmark -c 50 -P 16 ADDJOB ref <body> 0``
  against the first node (``--jobs`` requests): the denominator of every
  ratio;
* **read capacity**: one pipelined ``GETJOB NOHANG COUNT 1000`` +
  ``ACKJOB <ids>`` loop per node taking the reference's jobs (no Spark);
* **batch write**: ``df.write.format("disque")`` of ``--jobs`` rows;
* **batch read**: ``spark.read.format("disque")`` of those jobs, counted;
* **streaming read with ACK**: ``Trigger.AvailableNow`` into the ``noop``
  sink, until every job is acknowledged;
* the batch write again, then the streaming read with ``fastAck``
  (FASTACK instead of ACKJOB).

The nodes are warmed up first (PyPy's JIT): every Spark action once on
a fifth of ``--jobs``, then ``--jobs`` of the reference's requests, taken
by the read loop.  Each Spark action is also run once on 10 rows first: its time is the
action's fixed start-up (planning, task launch, a streaming query's start
and commit), shown apart and included in the rate.  Every row shows the
nodes' CPU (all three, user + system) per row, the Spark Python
workers' (executors, and the streaming source's process on the driver)
and the Spark JVM's per row, sampled from /proc.  Before each measurement the nodes are let
go quiet (acknowledged jobs are collected in the background).  Nodes and Spark are stopped at the end,
whatever happens.
"""

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # tests.support

from run import cpu_seconds, redis_benchmark  # noqa: E402
from tests.support.spark import jscan_all, make_session, nodes_option, total_qlen  # noqa: E402
from tests.support.process import Client, start_cluster, twistd_path  # noqa: E402

PYPY_TWISTD = os.path.join(ROOT, ".venv-pypy", "bin", "twistd")


class WorkerCPU:
    """CPU seconds (user + system) of the processes descended from this
    one that run ``exe`` (Spark's Python workers: PYSPARK_PYTHON is this
    interpreter; or the JVM: any ``java``), except ``exclude``, sampled
    every 0.25 s by a thread so that workers which come and go are counted
    while they live."""

    def __init__(self, exe, exclude=()):
        self.exe = exe if exe == "java" else os.path.realpath(exe)
        self.exclude = set(exclude) | {os.getpid()}
        self.seen = {}  # pid -> last CPU seconds
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _descendants(self):
        parent = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open("/proc/%s/stat" % name) as f:
                        parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    pass
        out, frontier = [], [os.getpid()]
        children = {}
        for pid, ppid in parent.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            pid = frontier.pop()
            for child in children.get(pid, ()):
                out.append(child)
                frontier.append(child)
        return out

    def _sample(self):
        for pid in self._descendants():
            if pid in self.exclude:
                continue
            try:
                exe = os.path.realpath("/proc/%d/exe" % pid)
                if exe != self.exe and os.path.basename(exe) != self.exe:
                    continue
                self.seen[pid] = cpu_seconds(pid)
            except OSError:
                pass

    def _run(self):
        while not self._stop.wait(0.25):
            self._sample()

    def total(self) -> float:
        self._sample()
        return sum(self.seen.values())

    def stop(self):
        self._stop.set()


def read_loop(node, queue, count=1000):
    """GETJOB NOHANG COUNT ``count`` + ACKJOB of the IDs, the ACKJOB sent
    with the next GETJOB, until the queue is empty; returns the jobs taken."""
    c = Client(node.port, timeout=60)
    taken = 0
    getjob = Client.encode("GETJOB", "NOHANG", "COUNT", count, "FROM", queue)
    try:
        c.send(getjob)
        while True:
            jobs = c.read(timeout=60)
            if not jobs:
                return taken
            taken += len(jobs)
            c.send(Client.encode("ACKJOB", *[j[1] for j in jobs]) + getjob)
            acked = c.read(timeout=60)
            assert acked == len(jobs), acked
    finally:
        c.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=2, help="of the written DataFrame")
    parser.add_argument("--twistd", default=PYPY_TWISTD if os.path.exists(PYPY_TWISTD) else twistd_path())
    parser.add_argument("--max-jobs-per-trigger", type=int, default=None,
                        help="the streaming read's maxJobsPerTrigger (default: the connector's)")
    parser.add_argument("--no-fast-ack", action="store_true",
                        help="skip the second write and the fastAck read (a connector without the option)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra option for every Spark action of the connector")
    args = parser.parse_args()
    n = args.jobs
    extra = dict(o.split("=", 1) for o in args.option)
    workdir = tempfile.mkdtemp(prefix="disque-spark-bench-")
    nodes = start_cluster(os.path.join(workdir, "cluster"), 3, twistd=args.twistd)
    spark = None
    notes = []
    results = []  # (name, rows, seconds, start-up seconds or None, nodes' CPU, workers' CPU)
    workers = WorkerCPU(sys.executable, exclude=[node.proc.pid for node in nodes])
    jvm = WorkerCPU("java")

    def nodes_cpu():
        return sum(cpu_seconds(node.proc.pid) for node in nodes)

    def settle(timeout=120.0):
        """Wait until the nodes are quiet (under 5% of a core over 0.5 s):
        acknowledged jobs are garbage-collected in the background, and that
        work must not land in the next figure."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = nodes_cpu()
            time.sleep(0.5)
            if nodes_cpu() - before < 0.025:
                return

    def measure(name, action, startup=None):
        """Run ``action`` (returns the rows it moved) and record it."""
        settle()
        cpu, wcpu, jcpu = nodes_cpu(), workers.total(), jvm.total()
        t = time.perf_counter()
        rows = action()
        results.append((name, rows, time.perf_counter() - t, startup, nodes_cpu() - cpu, workers.total() - wcpu,
                        jvm.total() - jcpu))
        return rows

    def timed(action):
        t = time.perf_counter()
        action()
        return time.perf_counter() - t

    try:
        spark = make_session("disque-spark-bench", args.master)
        opts = nodes_option(nodes)
        pad = "x" * max(0, args.body_size - 12)

        def reader(queue):
            r = spark.read.format("disque").option("nodes", opts).option("queue", queue)
            for k, v in extra.items():
                r = r.option(k, v)
            return r

        def write(df, queue):
            w = df.write.format("disque").mode("append").option("nodes", opts).option("queue", queue)
            for k, v in extra.items():
                w = w.option(k, v)
            w.save()

        def stream(queue, checkpoint, fast_ack=False):
            r = spark.readStream.format("disque").option("nodes", opts).option("queue", queue)
            if fast_ack:
                r = r.option("fastAck", "true")
            if args.max_jobs_per_trigger:
                r = r.option("maxJobsPerTrigger", args.max_jobs_per_trigger)
            for k, v in extra.items():
                r = r.option(k, v)
            query = (r.load().writeStream.format("noop").option("checkpointLocation", os.path.join(workdir, checkpoint))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            while any(jscan_all(node, "QUEUE", queue, "STATE", "queued", "STATE", "active") for node in nodes):
                time.sleep(0.05)
            phases = {}
            for p in query.recentProgress:
                for k, v in p["durationMs"].items():
                    phases[k] = phases.get(k, 0) + v
            notes.append("%s: %d batches; Spark's durationMs summed: %s" % (
                queue, len(query.recentProgress), ", ".join("%s %d" % kv for kv in sorted(phases.items()))))
            return sum(p["numInputRows"] for p in query.recentProgress)

        def frame(rows):
            return (spark.range(0, rows, numPartitions=args.partitions)
                    .selectExpr("concat(lpad(cast(id as string), 12, '0'), '%s') as body" % pad))

        # Warm-up (the JVM's and the nodes' JIT: every action once on a fifth
        # of the rows), then each action on 10 rows: its fixed start-up.
        spark.range(10).collect()
        warm = frame(max(10, n // 5)).cache()
        warm.count()
        write(warm, "warm")
        reader("warm").load().count()
        stream("warm", "warm")
        small = frame(10).cache()
        small.count()
        write_startup = timed(lambda: write(small, "tiny"))
        read_startup = timed(lambda: reader("tiny").load().count())
        stream_startup = timed(lambda: stream("tiny", "tiny"))

        body = "x" * args.body_size
        # The nodes' warm-up (PyPy's JIT): the reference's and the read loop's commands, unmeasured.
        redis_benchmark(nodes[0].port, 50, n, "ADDJOB", "warmref", body, "0", pipeline=16)
        read_loop(nodes[0], "warmref")
        settle()
        cpu = nodes_cpu()
        rate, _ = redis_benchmark(nodes[0].port, 50, n, "ADDJOB", "ref", body, "0", pipeline=16)
        results.append(("redis-benchmark -c 50 -P 16 ADDJOB (reference)", n, n / rate, None,
                        nodes_cpu() - cpu, 0.0, 0.0))
        measure("raw GETJOB NOHANG COUNT 1000 + ACKJOB loop, one per node",
                lambda: sum(read_loop(node, "ref") for node in nodes))

        df = frame(n).cache()
        df.count()
        measure("Spark batch write", lambda: write(df, "bench") or n, write_startup)
        assert total_qlen(nodes, "bench") == n
        got = measure("Spark batch read, counted", lambda: reader("bench").load().count(), read_startup)
        assert got == n, got
        got = measure("Spark streaming read with ACK (AvailableNow, noop sink)", lambda: stream("bench", "ckpt"),
                      stream_startup)
        assert got >= n, got
        if not args.no_fast_ack:
            measure("Spark batch write, again", lambda: write(df, "bench2") or n, write_startup)
            got = measure("Spark streaming read with fastAck (FASTACK)", lambda: stream("bench2", "ckpt2", True),
                          stream_startup)
            assert got >= n, got
    finally:
        workers.stop()
        jvm.stop()
        if spark is not None:
            spark.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    ref = results[0][1] / results[0][2]
    print()
    print("nodes: %s; %d jobs of %d bytes; %s, %d partitions written%s"
          % (args.twistd, n, args.body_size, args.master, args.partitions,
             "; options %s" % extra if extra else ""))
    print()
    print("| 3-node cluster, REPLICATE 3 | rows | seconds | of which start-up | rows/s | vs reference "
          "| nodes' CPU us/row | Spark Python workers' CPU us/row | Spark JVM CPU us/row |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows, secs, startup, cpu, wcpu, jcpu in results:
        rate = rows / secs
        print("| %s | %d | %.2f | %s | %.0f | %.2f | %.1f | %.1f | %.1f |"
              % (name, rows, secs, "-" if startup is None else "%.2f" % startup, rate, rate / ref,
                 cpu / rows * 1e6, wcpu / rows * 1e6, jcpu / rows * 1e6))
    print()
    for note in notes:
        if not note.startswith(("warm", "tiny")):
            print("* " + note)


if __name__ == "__main__":
    main()
