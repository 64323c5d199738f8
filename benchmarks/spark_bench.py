"""Benchmark the Spark connector on a 3-node cluster.

Usage::

    .venv/bin/python benchmarks/spark_bench.py [--jobs 100000] [--body-size 100] [--master local[2]]

Starts three real ``twistd -n disque`` nodes on free 127.0.0.1 ports
(joined in a full mesh) and a local SparkSession, then measures rows per
second for:

* batch write: ``df.write.format("disque")`` of ``--jobs`` rows (ADDJOB
  with DEDUP, pipelined, one node per partition);
* batch read: ``spark.read.format("disque")`` of the same jobs (JSCAN plan,
  pipelined SHOW), counted;
* streaming read end to end: a query (Trigger.AvailableNow) that takes the
  jobs with GETJOB, runs them through foreachBatch (a count) and ACKs them
  at commit, until every job is acknowledged;
* baseline: one plain Python loop adding the same jobs with pipelined
  ADDJOB over one socket to one node (no Spark);
* calibration: the same loop with LPUSH against a ``redis-server`` started
  for the run (this machine is shared and noisy: compare ratios).

Every row also shows the nodes' CPU time (all three, user + system) per
row, from /proc.

Spark start-up is excluded (the session is warmed up first) but each
action's planning and task start-up are included.  Nodes and Spark are
stopped at the end, whatever happens.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # tests.support

from run import cpu_seconds, start_redis  # noqa: E402
from tests.support.spark import jscan_all, make_session, nodes_option, total_qlen  # noqa: E402
from tests.support.process import Client, start_cluster  # noqa: E402


def plain_loop(port, bodies, command, window=500):
    """``command(body)`` (the arguments of one request) for every body,
    pipelined over one socket; returns the seconds taken."""
    c = Client(port)
    t = time.perf_counter()
    try:
        for i in range(0, len(bodies), window):
            chunk = bodies[i:i + window]
            c.send(b"".join(Client.encode(*command(b)) for b in chunk))
            for _ in chunk:
                reply = c.read(timeout=60)
                assert not isinstance(reply, Exception), reply
    finally:
        c.close()
    return time.perf_counter() - t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    n = args.jobs
    workdir = tempfile.mkdtemp(prefix="disque-spark-bench-")
    nodes = start_cluster(os.path.join(workdir, "cluster"), 3)
    spark = None
    results = []
    redis_proc, redis_port = start_redis()

    def nodes_cpu():
        return sum(cpu_seconds(node.proc.pid) for node in nodes)

    def measure(name, action):
        """Run ``action`` (returns the rows it moved) and record it."""
        cpu = nodes_cpu()
        t = time.perf_counter()
        rows = action()
        results.append((name, rows, time.perf_counter() - t, nodes_cpu() - cpu))
        return rows

    try:
        spark = make_session("disque-spark-bench", args.master)
        opts = nodes_option(nodes)
        pad = "x" * max(0, args.body_size - 12)
        spark.range(10).collect()  # warm-up
        spark.read.format("disque").option("nodes", opts).option("queue", "warm").load().collect()

        bodies = [(("%012d" % i) + pad).encode() for i in range(n)]
        measure("plain Python loop, pipelined ADDJOB",
                lambda: plain_loop(nodes[0].port, bodies, lambda b: ("ADDJOB", "plain", b, 5000)) and n)
        redis_rate = None
        if redis_port:
            redis_rate = n / plain_loop(redis_port, bodies, lambda b: ("LPUSH", "plain", b))

        df = spark.range(0, n, numPartitions=4).selectExpr("concat(lpad(cast(id as string), 12, '0'), '%s') as body" % pad)
        df.cache().count()
        measure("Spark batch write (ADDJOB + DEDUP)", lambda: df.write.format("disque").mode("append")
                .option("nodes", opts).option("queue", "bench").save() or n)
        assert total_qlen(nodes, "bench") == n

        got = measure("Spark batch read (JSCAN + SHOW)", lambda: spark.read.format("disque")
                      .option("nodes", opts).option("queue", "bench").load().count())
        assert got == n, got

        seen = [0]

        def sink(batch, _):
            seen[0] += batch.count()

        cpu = nodes_cpu()
        t = time.perf_counter()
        query = (spark.readStream.format("disque").option("nodes", opts).option("queue", "bench")
                 .option("maxJobsPerTrigger", 10000).load().writeStream.foreachBatch(sink)
                 .option("checkpointLocation", os.path.join(workdir, "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        while any(jscan_all(node, "QUEUE", "bench", "STATE", "queued", "STATE", "active") for node in nodes):
            time.sleep(0.05)
        results.append(("Spark streaming read, end to end with ACK", seen[0], time.perf_counter() - t,
                        nodes_cpu() - cpu))
        assert seen[0] >= n, seen[0]
    finally:
        if redis_proc is not None:
            redis_proc.kill()
        if spark is not None:
            spark.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    base = results[0][1] / results[0][2]
    print()
    print("| 3-node cluster, %d-byte bodies | rows | seconds | rows/s | vs plain loop | vs redis-server "
          "LPUSH loop | nodes' CPU us/row |" % args.body_size)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows, secs, cpu in results:
        rate = rows / secs
        vs_redis = "%.3f" % (rate / redis_rate) if redis_rate else "-"
        print("| %s | %d | %.2f | %.0f | %.2f | %s | %.1f |" % (name, rows, secs, rate, rate / base, vs_redis,
                                                             cpu / rows * 1e6))
    if redis_rate:
        print("\nredis-server, the same plain loop with LPUSH: %.0f rows/s" % redis_rate)


if __name__ == "__main__":
    main()
