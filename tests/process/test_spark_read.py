"""Reading with Spark from a real 3-node cluster: a batch read returns each
job in the cluster once with its fields, without consuming it; a streaming
query moves every job through foreachBatch and leaves nothing behind."""

import os
from datetime import datetime, timedelta, timezone

from pyspark import TaskContext
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from tests.support.spark import add_jobs, jscan_all, nodes_option, queued_bodies, total_qlen
from tests.support.process import call, show, wait_for


def test_batch_read_returns_each_job_once_with_its_fields(spark, spark_cluster):
    nodes = spark_cluster
    expected = {}
    for i, node in enumerate(nodes):
        bodies = [b"n%d-%d" % (i, j) for j in range(40)]
        ids = add_jobs(node, "br", bodies, "RETRY", 120, "TTL", 3600)
        expected.update(zip(ids, bodies))
    # A job that is delivered (active) is still listed; one of another queue is not.
    call(nodes[1], "GETJOB", "NOHANG", "COUNT", 5, "FROM", "br")
    other = add_jobs(nodes[0], "br-other", [b"nope"])
    # Three copies of each job exist (REPLICATE 3 by default on 3 nodes).
    assert all(len(jscan_all(n, "QUEUE", "br")) == 120 for n in nodes)

    df = (spark.read.format("disque").option("NODES", nodes_option(nodes[:1]))
          .option("queue", "br").load())
    assert df.rdd.getNumPartitions() == 3  # one per node, the others found by HELLO
    rows = df.collect()
    got = {r.id.encode(): r for r in rows}
    assert len(rows) == len(got) == 120  # each job once
    assert set(got) == set(expected) and other[0] not in got
    creator = {call(n, "HELLO")[1][:8]: n for n in nodes}
    for job_id, row in got.items():
        info = show(creator[job_id[2:10]], job_id)  # the copy the row was read from
        assert bytes(row.body) == expected[job_id] and row.queue == "br"
        assert row.state == info[b"state"].decode() and row.state in ("queued", "active")
        assert row.repl == 3 and row.retry == 120 and row.nacks == 0
        assert row.additional_deliveries == int(info[b"additional-deliveries"])
        assert 3500 <= row.ttl <= 3600
        ctime = row.ctime.replace(tzinfo=timezone.utc) if row.ctime.tzinfo is None else row.ctime
        assert abs(ctime.astimezone(timezone.utc) - datetime.fromtimestamp(
            int(info[b"ctime"]) // 10 ** 9, timezone.utc)) < timedelta(seconds=2)
    assert sum(r.state == "active" for r in rows) == 5
    # Not consumed.
    assert total_qlen(nodes, "br") == 115
    # Several queues at once.
    assert spark.read.format("disque").option("nodes", nodes_option(nodes)) \
        .option("queue", "br,br-other").load().count() == 121


def test_streaming_read_moves_10000_jobs_and_acks_them_all(spark, spark_cluster, tmp_path):
    nodes = spark_cluster
    sent = {}
    for i, node in enumerate(nodes):
        bodies = [b"s%d-%d" % (i, j) for j in range(3334 if i < 2 else 3332)]
        sent.update(zip(add_jobs(node, "sr", bodies), bodies))
    assert len(sent) == 10000
    seen = []
    batches = []

    def sink(df, batch_id):
        rows = df.select("id", "body", "queue", "state", "nacks").collect()
        batches.append((batch_id, len(rows)))
        seen.extend((r.id.encode(), bytes(r.body), r.queue, r.state) for r in rows)

    query = (spark.readStream.format("disque").option("nodes", nodes_option(nodes))
             .option("queue", "sr").option("maxJobsPerTrigger", 3000).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: len(seen) >= 10000, 120, what="10000 jobs through foreachBatch", interval=0.2)
        # Every job acknowledged and collected on every node: the last batch
        # is committed (ACKed) by the empty batch the source adds for it.
        wait_for(lambda: not any(jscan_all(n, "QUEUE", "sr") for n in nodes), 60,
                 what="no job of queue sr left on any node", interval=0.2)
        assert query.exception() is None
    finally:
        query.stop()
    assert total_qlen(nodes, "sr") == 0
    assert {i: b for i, b, _, _ in seen} == sent  # every job delivered...
    assert len(seen) == 10000                     # ...once
    assert all(q == "sr" and s == "active" for _, _, q, s in seen)
    assert max(n for _, n in batches) <= 3000


def test_a_retried_read_task_reads_the_same_jobs(spark, spark_cluster, tmp_path):
    """A task of the first micro-batch fails once after its partition was
    read (a UDF in the same stage raises on attempt 0): its retry reads
    exactly the jobs the partition holds, so every job reaches the sink
    once and every job is acknowledged."""
    nodes = spark_cluster
    sent = {}
    for i, node in enumerate(nodes):
        bodies = [b"t%d-%d" % (i, j) for j in range(300)]
        sent.update(zip(add_jobs(node, "rt", bodies), bodies))
    marker = str(tmp_path / "failed-once")

    def fail_once(job_id):
        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 0:
            open(marker, "a").close()
            raise RuntimeError("forced failure of a read task's first attempt")
        return job_id

    check = F.udf(fail_once, StringType())
    seen = []

    def sink(df, batch_id):
        seen.extend((r.id.encode(), bytes(r.body)) for r in df.collect())

    query = (spark.readStream.format("disque").option("nodes", nodes_option(nodes))
             .option("queue", "rt").option("maxJobsPerTrigger", 400).load()
             .select(check("id").alias("id"), "body")
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: len(seen) >= len(sent) or query.exception(), 120, what="every job through the sink",
                 interval=0.2)
        wait_for(lambda: not any(jscan_all(n, "QUEUE", "rt") for n in nodes), 60,
                 what="no job of queue rt left on any node", interval=0.2)
        assert query.exception() is None
    finally:
        query.stop()
    assert os.path.exists(marker), "no task failed: the test did not test a retry"
    assert len(seen) == len(sent) and dict(seen) == sent  # each job once, with its body


def test_a_poison_job_goes_to_the_dead_letter_queue_instead_of_failing_the_query_forever(spark, spark_cluster,
                                                                                          tmp_path):
    """A job that makes every batch holding it fail: with maxDeliveries 2
    and nackDelayMs, each failed run NACKs it as the query stops, the
    restarted query replays the batch (SHOW by ID) until the job has been
    delivered twice, then moves it to pq:dead and goes on."""
    nodes = spark_cluster
    good = {}
    for i, node in enumerate(nodes):
        bodies = [b"good-%d-%d" % (i, j) for j in range(4)]
        good.update(zip(add_jobs(node, "pq", bodies, "RETRY", 120), bodies))
    [poison] = add_jobs(nodes[1], "pq", [b"poison"], "RETRY", 120)
    seen = []

    def sink(df, batch_id):
        rows = [(r.id.encode(), bytes(r.body), r.nacks) for r in df.collect()]
        if any(body == b"poison" for _, body, _ in rows):
            raise RuntimeError("poison job")
        seen.extend(rows)

    def run():
        return (spark.readStream.format("disque").option("nodes", nodes_option(nodes))
                .option("queue", "pq").option("maxJobsPerTrigger", 1)
                .option("maxDeliveries", 2).option("nackDelayMs", 60000).load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="100 milliseconds").start())

    def nacked_with_delay(nacks):
        states = [show(n, poison) for n in nodes]
        return any(st and int(st[b"nacks"]) == nacks and b"redeliver-at" in st for st in states)

    failures = []
    for attempt in range(5):
        query = run()
        try:
            wait_for(lambda: query.exception() is not None or (
                len(seen) >= len(good) and total_qlen(nodes, "pq:dead") == 1), 120,
                what="a failed run, or every good job through and the poison job moved", interval=0.2)
            if query.exception() is None:
                break
            failures.append(str(query.exception()))
        finally:
            query.stop()
        # The failed batch's job was NACKed as the query stopped (Spark ends
        # the source's process with SIGTERM), with the delay, on the node
        # that delivered it (federation may have moved it from nodes[1]).
        wait_for(lambda: nacked_with_delay(len(failures)), 15, what="the poison job NACKed with a delay")

    assert len(failures) == 2 and all("poison job" in f for f in failures), failures
    assert {i: b for i, b, _ in seen} == good
    dead = queued_bodies(nodes, "pq:dead")
    assert dead == [b"poison"]
    for node in nodes:  # the original is acknowledged (gone or acked) everywhere
        state = show(node, poison)
        assert state is None or state[b"state"] == b"acked"
    assert total_qlen(nodes, "pq") == 0
