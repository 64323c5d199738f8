"""Bad options fail the query with one clear message naming the problem:
unknown option, no queue, unreachable nodes, wrong or missing password
(a node started with --requirepass), a user's queues and another's (a
node with two tenants), for reads, streams and writes."""

import re

import pytest

from tests.support.process import NodeProcess, free_port, start_tenants


@pytest.fixture(scope="module")
def secret_node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("secret"), args=["--requirepass", "secret"]).start()
    yield n
    n.stop()


def error_of(action):
    with pytest.raises(Exception) as e:
        action()
    return str(e.value)


def assert_one_message(text, message):
    """``message`` is the error, stated once (Spark adds its own framing and
    the Python traceback around it)."""
    lines = [line for line in text.splitlines() if re.search(r"(Error|Exception): disque: ", line)]
    assert len(lines) == 1, text
    assert message in lines[0], text


def batch_read(spark, **options):
    reader = spark.read.format("disque")
    for k, v in options.items():
        reader = reader.option(k, v)
    return lambda: reader.load().collect()


def stream_read(spark, tmp_path, **options):
    def run():
        reader = spark.readStream.format("disque")
        for k, v in options.items():
            reader = reader.option(k, v)
        q = (reader.load().writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / ("ck%d" % len(list(tmp_path.iterdir()))))).start())
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    return run


def batch_write(spark, **options):
    writer = spark.range(3).selectExpr("cast(id as string) as body").write.format("disque").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.save


def stream_write(spark, tmp_path, **options):
    def run():
        writer = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
                  .selectExpr("cast(value as string) as body").writeStream.format("disque")
                  .option("checkpointLocation", str(tmp_path / "wck")))
        for k, v in options.items():
            writer = writer.option(k, v)
        q = writer.start()
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    return run


def test_unknown_option_and_no_queue(spark, tmp_path):
    assert_one_message(error_of(batch_read(spark, queue="q", colour="red")), "unknown option 'colour' for a read")
    assert_one_message(error_of(stream_read(spark, tmp_path, queue="q", colour="red")),
                       "unknown option 'colour' for a streaming read")
    assert_one_message(error_of(batch_write(spark, queue="q", maxJobsPerTrigger="5")),
                       "option 'maxJobsPerTrigger' applies to streaming reads only, not to a write")
    assert_one_message(error_of(batch_read(spark)), "no queue given")
    assert_one_message(error_of(batch_write(spark)), "no queue given")
    assert_one_message(error_of(batch_write(spark, queue="q", bodyColumn="nope")),
                       "column 'nope' (option 'bodyColumn') is not in the DataFrame")


def test_unreachable_nodes(spark, tmp_path):
    dead = "127.0.0.1:%d,127.0.0.1:%d" % (free_port(), free_port())
    msg = "no reachable node among %s" % dead
    assert_one_message(error_of(batch_read(spark, queue="q", nodes=dead)), msg)
    assert_one_message(error_of(stream_read(spark, tmp_path, queue="q", nodes=dead)), msg)
    assert_one_message(error_of(batch_write(spark, queue="q", nodes=dead)), msg)
    assert_one_message(error_of(stream_write(spark, tmp_path, queue="q", nodes=dead)), msg)


def test_password(spark, tmp_path, secret_node):
    addr = "127.0.0.1:%d" % secret_node.port
    wrong = "AUTH failed on node %s: invalid password" % addr
    assert_one_message(error_of(batch_read(spark, queue="q", nodes=addr, password="nope")), wrong)
    assert_one_message(error_of(stream_read(spark, tmp_path, queue="q", nodes=addr, password="nope")), wrong)
    assert_one_message(error_of(batch_write(spark, queue="q", nodes=addr, password="nope")), wrong)
    assert_one_message(error_of(batch_read(spark, queue="q", nodes=addr)),
                       "node %s requires a password (set the 'password' option)" % addr)
    # The right one works, for writes and reads.
    batch_write(spark, queue="pq", nodes=addr, password="secret")()
    rows = spark.read.format("disque").option("nodes", addr).option("password", "secret") \
        .option("queue", "pq").load().collect()
    assert sorted(bytes(r.body) for r in rows) == [b"0", b"1", b"2"]


def test_tenants(spark, tmp_path):
    node = start_tenants(tmp_path / "tenants")
    bob = node.client()
    try:
        addr = "127.0.0.1:%d" % node.port
        alice = {"nodes": addr, "username": "alice", "password": "alicepw"}
        assert bob.call("AUTH", "bob", "bobpw") == b"OK"
        theirs = bob.call("ADDJOB", "b:s", "bob's", "0")
        # alice writes and reads her queues (the executors log in as her)...
        batch_write(spark, queue="a:s", **alice)()
        rows = spark.read.format("disque").options(queue="a:s", **alice).load().collect()
        assert sorted(bytes(r.body) for r in rows) == [b"0", b"1", b"2"]
        # ...and every operation on bob's fails with the user named.
        refused = "refused on node %s to user 'alice': NOPERM No permissions to access a queue" % addr
        assert_one_message(error_of(batch_write(spark, queue="b:s", **alice)), "ADDJOB " + refused)
        assert_one_message(error_of(batch_read(spark, queue="b:s", **alice)), "JSCAN " + refused)
        assert_one_message(error_of(stream_read(spark, tmp_path, queue="b:s", **alice)), "GETJOB " + refused)
        shown = bob.call("SHOW", theirs)
        assert bob.call("QLEN", "b:s") == 1 and dict(zip(shown[::2], shown[1::2]))[b"state"] == b"queued"
        wrong = dict(alice, password="bobpw")
        assert_one_message(error_of(batch_read(spark, queue="a:s", **wrong)),
                           "AUTH failed on node %s: WRONGPASS invalid username-password pair" % addr)
    finally:
        bob.close()
        node.stop()


def test_extension_options(spark, tmp_path):
    """Issue 17's options fail the query at its start, as the others do."""
    assert_one_message(error_of(stream_read(spark, tmp_path, queue="q", maxDeliveries="2")),
                       "option 'maxDeliveries' needs 'nackDelayMs'")
    assert_one_message(error_of(stream_read(spark, tmp_path, queue="q", nackDelayMs="10", deadLetter="d")),
                       "option 'deadLetter' needs 'maxDeliveries'")
    assert_one_message(error_of(batch_read(spark, queue="q", maxDeliveries="2")),
                       "option 'maxDeliveries' applies to writes and streaming reads, not to a read")
    assert_one_message(error_of(batch_write(spark, queue="q", priority="11")),
                       "option 'priority' must be between 1 and 9, got 11")
    assert_one_message(error_of(batch_write(spark, queue="q", backoff="9,3")),
                       "option 'backoff': the max (3 ms) is below the base (9 ms)")
    assert_one_message(error_of(batch_write(spark, queue="q", priorityColumn="body")),
                       "column 'body' (option 'priorityColumn') must be tinyint or smallint or int or bigint, "
                       "not string")
