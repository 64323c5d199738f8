"""Writing with Spark to a real 3-node cluster: rows become jobs, a task
that fails after writing part of its rows and runs again adds no
duplicates (DEDUP keys), per-row queues and user keys."""

from pyspark import TaskContext
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from tests.support.spark import nodes_option, queued_bodies, total_qlen
from tests.support.process import Client, info

ROWS = 100000
FAIL_AT = 25000 + 20000  # in partition 1 (rows 25000..49999), after 2 Arrow batches


def addjob_calls(nodes):
    total = 0
    for node in nodes:
        c = Client(node.port)
        try:
            stats = info(c, "commandstats").get("cmdstat_addjob", "calls=0")
        finally:
            c.close()
        total += int(stats.split(",")[0].split("=")[1])
    return total


@F.udf(StringType())
def body_failing_once(i):
    ctx = TaskContext.get()
    if i == FAIL_AT and ctx.attemptNumber() == 0:
        raise RuntimeError("forced failure of the first attempt after writing part of the rows")
    return "row-%d" % i


def test_batch_write_with_a_retried_task_adds_every_row_once(spark, spark_cluster):
    nodes = spark_cluster
    calls_before = addjob_calls(nodes)
    df = spark.range(0, ROWS, numPartitions=4).select(body_failing_once("id").alias("body"))
    (df.write.format("disque").mode("append").option("nodes", nodes_option(nodes))
     .option("queue", "bw").option("replicate", 1).save())
    # The failed attempt really did write rows that its retry sent again...
    assert addjob_calls(nodes) - calls_before >= ROWS + 10000
    # ...and none of them became a second job.
    assert total_qlen(nodes, "bw") == ROWS
    bodies = queued_bodies(nodes, "bw")
    assert len(bodies) == ROWS and set(bodies) == {b"row-%d" % i for i in range(ROWS)}
    # Each partition went to one node: the retried one too, whatever its
    # attempts met.  (Which node is a hash of the write id and the
    # partition: four partitions may all pick the same one, so how they
    # spread is not checked here but in test_spark_units' node_order tests.)
    node_of = {}
    for i, n in enumerate(nodes):
        for body in queued_bodies([n], "bw"):
            node_of[int(body[4:])] = i
    share = ROWS // 4
    for p in range(4):
        assert len({node_of[row] for row in range(p * share, (p + 1) * share)}) == 1, "partition %d split" % p


def test_binary_bodies_per_row_queues_and_user_keys(spark, spark_cluster):
    nodes = spark_cluster
    rows = [(b"\x00bin%d" % i, "wq-%d" % (i % 2), "key-%d" % (i % 5)) for i in range(10)]
    df = spark.createDataFrame(rows, "payload binary, target string, k string")
    writer = (df.write.format("disque").mode("append").option("nodes", nodes_option(nodes[:1]))
              .option("queue", "unused").option("bodyColumn", "payload").option("queueColumn", "target")
              .option("retry", 9))
    writer.save()
    assert total_qlen(nodes, "wq-0") == 5 and total_qlen(nodes, "wq-1") == 5
    assert sorted(queued_bodies(nodes, "wq-0") + queued_bodies(nodes, "wq-1")) == sorted(r[0] for r in rows)
    # A user key: one job per distinct (queue, key), however often it is written.
    keyed = writer.option("queueColumn", "k").option("dedupColumn", "k")
    keyed.save()
    keyed.save()
    assert [total_qlen(nodes, "key-%d" % i) for i in range(5)] == [1] * 5


def test_one_node_down_reads_and_writes_go_on(spark, tmp_path):
    """A node killed -9: a batch read returns every job once from the
    copies on the others, and a batch write sends the partitions that would
    have gone to it to the next node (REPLICATE 2 still has two nodes)."""
    from tests.support.process import start_cluster

    nodes = start_cluster(tmp_path, 3)
    try:
        ids = set(add_ids(nodes[0], "down", 60))
        nodes[0].kill()
        opts = nodes_option(nodes)  # the dead node is still listed, and first
        rows = spark.read.format("disque").option("nodes", opts).option("queue", "down").load().collect()
        assert sorted(r.id.encode() for r in rows) == sorted(ids)
        df = spark.range(0, 2000, numPartitions=6).selectExpr("concat('d-', cast(id as string)) as body")
        df.write.format("disque").mode("append").option("nodes", opts).option("queue", "dw") \
            .option("replicate", 2).save()
        bodies = queued_bodies(nodes[1:], "dw")
        assert sorted(bodies) == sorted(b"d-%d" % i for i in range(2000))
    finally:
        for n in nodes:
            n.stop()


def add_ids(node, queue, n):
    c = Client(node.port)
    try:
        return [c.call("ADDJOB", queue, "body-%d" % i, 0) for i in range(n)]
    finally:
        c.close()


def test_write_with_a_priority_column_and_the_extension_options(spark, spark_cluster):
    """A row's priority column wins over the priority option (null: the
    option); QPEEK then serves the highest first.  backoff, maxDeliveries
    and deadLetter reach every job (SHOW)."""
    nodes = spark_cluster
    rows = [("p-none-%d" % i, None) for i in range(3)] + [("p9", 9), ("p1", 1), ("p7-%d" % 0, 7), ("p7-1", 7)]
    df = spark.createDataFrame(rows, "body string, priority int").coalesce(1)
    (df.write.format("disque").mode("append").option("nodes", nodes_option(nodes))
     .option("queue", "pw").option("priority", 3).option("backoff", "200,5000")
     .option("maxDeliveries", 4).option("deadLetter", "pw-dead").save())
    holders = [n for n in nodes if Client(n.port).call("QLEN", "pw")]
    assert len(holders) == 1  # one partition, one node
    c = Client(holders[0].port)
    try:
        peeked = c.call("QPEEK", "pw", 10)
        bodies = [j[2] for j in peeked]
        assert bodies == [b"p9", b"p7-0", b"p7-1", b"p-none-0", b"p-none-1", b"p-none-2", b"p1"]
        for job in peeked:
            reply = c.call("SHOW", job[1])
            shown = dict(zip(reply[::2], reply[1::2]))
            assert shown[b"priority"] == {b"p9": 9, b"p1": 1}.get(job[2], 7 if job[2].startswith(b"p7") else 3)
            assert [int(v) for v in shown[b"backoff"]] == [200, 5000] and shown[b"max-deliveries"] == 4
            assert shown[b"dead-letter"] == b"pw-dead"
    finally:
        c.close()
    # A row's priority out of range fails the write, naming the row.
    bad = spark.createDataFrame([("ok", 5), ("bad", 12)], "body string, priority bigint").coalesce(1)
    try:
        bad.write.format("disque").mode("append").option("nodes", nodes_option(nodes)).option("queue", "pw2").save()
    except Exception as e:
        assert "has priority 12 (column 'priority'): it must be between 1 and 9" in str(e)
    else:
        raise AssertionError("a priority of 12 was written")
