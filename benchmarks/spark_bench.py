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
  ADDJOB over one socket to one node (no Spark).

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
sys.path.insert(0, os.path.join(ROOT, "tests"))

from spark_support import jscan_all, make_session, nodes_option, total_qlen  # noqa: E402
from support import Client, start_cluster  # noqa: E402


def plain_loop(node, queue, bodies, window=500):
    """Pipelined ADDJOB over one socket; returns the seconds taken."""
    c = Client(node.port)
    t = time.perf_counter()
    try:
        for i in range(0, len(bodies), window):
            chunk = bodies[i:i + window]
            c.send(b"".join(Client.encode("ADDJOB", queue, b, 5000) for b in chunk))
            for _ in chunk:
                reply = c.read(timeout=60)
                assert reply.startswith(b"D-"), reply
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
    try:
        spark = make_session("disque-spark-bench", args.master)
        opts = nodes_option(nodes)
        pad = "x" * max(0, args.body_size - 12)
        spark.range(10).collect()  # warm-up
        spark.read.format("disque").option("nodes", opts).option("queue", "warm").load().collect()

        bodies = [(("%012d" % i) + pad).encode() for i in range(n)]
        secs = plain_loop(nodes[0], "plain", bodies)
        results.append(("plain Python loop, pipelined ADDJOB", n, secs))

        df = spark.range(0, n, numPartitions=4).selectExpr("concat(lpad(cast(id as string), 12, '0'), '%s') as body" % pad)
        df.cache().count()
        t = time.perf_counter()
        df.write.format("disque").mode("append").option("nodes", opts).option("queue", "bench").save()
        results.append(("Spark batch write (ADDJOB + DEDUP)", n, time.perf_counter() - t))
        assert total_qlen(nodes, "bench") == n

        t = time.perf_counter()
        got = spark.read.format("disque").option("nodes", opts).option("queue", "bench").load().count()
        results.append(("Spark batch read (JSCAN + SHOW)", got, time.perf_counter() - t))
        assert got == n, got

        seen = [0]

        def sink(batch, _):
            seen[0] += batch.count()

        t = time.perf_counter()
        query = (spark.readStream.format("disque").option("nodes", opts).option("queue", "bench")
                 .option("maxJobsPerTrigger", 10000).load().writeStream.foreachBatch(sink)
                 .option("checkpointLocation", os.path.join(workdir, "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        while any(jscan_all(node, "QUEUE", "bench", "STATE", "queued", "STATE", "active") for node in nodes):
            time.sleep(0.05)
        results.append(("Spark streaming read, end to end with ACK", seen[0], time.perf_counter() - t))
        assert seen[0] >= n, seen[0]
    finally:
        if spark is not None:
            spark.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    base = results[0][1] / results[0][2]
    print()
    print("%-45s %10s %9s %12s %9s" % ("3-node cluster, %d-byte bodies" % args.body_size, "rows", "seconds",
                                       "rows/s", "vs loop"))
    for name, rows, secs in results:
        print("%-45s %10d %9.2f %12.0f %8.2fx" % (name, rows, secs, rows / secs, rows / secs / base))


if __name__ == "__main__":
    main()
