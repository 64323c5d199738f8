"""Fast tests of the Spark connector without a SparkSession: options,
keys, node choice, offsets, partition planning, and the stream reader's
offset methods driven by hand against a real node."""

import json
import os
import pickle
import signal
import time
from types import SimpleNamespace

import pytest

from disque.spark.batch_read import assign_jobs
from disque.client import errors
from disque.spark.connection import (AuthError, ConnectError, Connection, NoPermissionError,
                                     ServerError, discover, refusal)
from disque.spark.keys import content_hash, derived_key, key_order, node_order, stream_write_id, user_key
from disque.spark.offsets import (initial_offset, job_count, make_offset, pack_ids, plan_partitions,
                                  unpack_ids)
from disque.spark.options import (READ, STREAM_READ_MODE, WRITE_MODE, OptionError, parse_nodes,
                                  parse_options)
from disque.spark.connection import DisqueSparkError
from disque.spark.stream_read import _stop_on_sigterm, is_spent, read_partition
from disque.spark.workers import describe
from disque.spark.write import _commands, check_schema, write_partition
from pyspark.sql.streaming.datasource import ReadMaxRows

from tests.support.spark import add_jobs, qlen, stream_reader, total_qlen
from tests.support.process import NodeProcess, call, free_port, show, wait_for


# -- the workers' check (disque/spark/workers.py) ----------------------------------

def test_workers_report_is_one_line_naming_the_interpreters():
    driver = "/work/.venv/bin/python3"
    assert describe(("/usr/bin/python3", "/tmp/job", "/usr/lib/disque", None), driver) is None
    assert describe(("/usr/bin/python3", "/tmp/job", None, "No module named 'disque'"), driver) == (
        "disque: Spark's Python workers run /usr/bin/python3, which cannot import disque (No module named "
        "'disque'); the driver runs /work/.venv/bin/python3. Set PYSPARK_PYTHON (or spark.pyspark.python "
        "with spark-submit) to the driver's interpreter.")
    # Found through the current directory (a checkout), or elsewhere.
    assert "(No module named 'hiredis'; it found disque in its current directory, /src/disque/disque); " in describe(
        ("/usr/bin/python3", "/src/disque", "/src/disque/disque", "No module named 'hiredis'"), driver)
    assert "(No module named 'pyarrow'; it found disque in /opt/lib/disque); " in describe(
        ("/usr/bin/python3", "/tmp/job", "/opt/lib/disque", "No module named 'pyarrow'"), driver)
    # The driver's own interpreter: PYSPARK_PYTHON is not the cause.
    same = describe((driver, "/src/old", "/src/old/disque", "No module named 'disque.spark'"), driver)
    assert same == ("disque: Spark's Python workers run /work/.venv/bin/python3, as the driver does, but "
                    "cannot import disque.spark there (No module named 'disque.spark'; it found disque in its "
                    "current directory, /src/old/disque): check PYTHONPATH and the workers' current directory.")


# -- options ------------------------------------------------------------------

def test_options_defaults_and_case_insensitive_names():
    o = parse_options({"QUEUE": "a, b,a", "maxJobsPerTrigger": "10", "WorkingInterval": "2.5"},
                      STREAM_READ_MODE)
    assert o.nodes == (("127.0.0.1", 7711),)
    assert o.queues == ("a", "b")
    assert o.max_jobs_per_trigger == 10 and o.working_interval == 2.5
    w = parse_options({"queue": "q", "replicate": "2", "retry": "0", "ttl": "60", "delay": "1",
                       "async": "TRUE", "bodycolumn": "payload", "timeout": "100"}, WRITE_MODE)
    assert w.addjob_args() == [b"REPLICATE", b"2", b"DELAY", b"1", b"RETRY", b"0", b"TTL", b"60", b"ASYNC"]
    assert w.body_column == "payload" and w.timeout_ms == 100
    assert parse_options({"queue": "q"}, WRITE_MODE).timeout_ms == 5000


@pytest.mark.parametrize("raw, mode, message", [
    ({"queue": "q", "colour": "red"}, READ, "unknown option 'colour'"),
    ({}, READ, "no queue given"),
    ({"queue": " , "}, STREAM_READ_MODE, "no queue given"),
    ({}, WRITE_MODE, "no queue given"),
    ({"queue": "q", "replicate": "2"}, READ, "'replicate' applies to writes only"),
    ({"queue": "q", "maxjobspertrigger": "5"}, READ, "'maxJobsPerTrigger' applies to streaming reads only"),
    ({"queue": "q", "maxjobspertrigger": "0"}, STREAM_READ_MODE, "between 1 and"),
    ({"queue": "q", "retry": "x"}, WRITE_MODE, "'retry' must be an integer"),
    ({"queue": "q", "async": "maybe"}, WRITE_MODE, "'async' must be true or false"),
    ({"queue": "a,b"}, WRITE_MODE, "a write takes one queue"),
    ({"queue": "q", "nodes": "localhost"}, READ, "is not host:port"),
    ({"queue": "q", "nodes": "h:99999"}, READ, "bad port"),
])
def test_bad_options_name_the_problem(raw, mode, message):
    with pytest.raises(OptionError) as e:
        parse_options(raw, mode)
    assert message in str(e.value) and str(e.value).startswith("disque: ")


def test_username_option_for_every_operation():
    for mode in (READ, STREAM_READ_MODE, WRITE_MODE):
        o = parse_options({"queue": "a:q", "UserName": "alice", "password": "alicepw"}, mode)
        assert (o.username, o.password) == ("alice", "alicepw")
        assert "'username': 'alice'" in repr(o) and "alicepw" not in repr(o)
        assert pickle.loads(pickle.dumps(o)).username == "alice"  # what the executors get
    for raw in ({"queue": "q"}, {"queue": "q", "username": ""}):
        assert parse_options(raw, READ).username is None  # AUTH <password>, the default user


def test_refusals_name_the_node_and_the_user():
    alice = SimpleNamespace(addr="127.0.0.1:7711", username="alice")
    e = refusal("ADDJOB", alice, ServerError("NOPERM No permissions to access a queue"))
    assert isinstance(e, NoPermissionError) and isinstance(e, errors.NoPermission)
    assert isinstance(e, DisqueSparkError)
    assert str(e) == ("disque: ADDJOB refused on node 127.0.0.1:7711 to user 'alice': "
                      "NOPERM No permissions to access a queue")
    default = SimpleNamespace(addr="127.0.0.1:7711", username=None)
    assert "to user 'default'" in str(refusal("SHOW", default, ServerError("NOPERM No permissions to access a job")))
    e = refusal("SHOW", default, ServerError("ERR boom"))
    assert type(e) is DisqueSparkError and str(e) == "disque: SHOW failed on node 127.0.0.1:7711: ERR boom"
    with pytest.raises(AuthError, match="node 127.0.0.1:7711 requires a password"):
        refusal("GETJOB", alice, ServerError("NOAUTH Authentication required."))


def test_extension_options_of_writes():
    w = parse_options({"queue": "q", "priority": "9", "backoff": "500", "maxDeliveries": "3",
                       "deadLetter": "q-dead", "retry": "10"}, WRITE_MODE)
    assert w.priority == 9 and w.backoff == (500,) and w.max_deliveries == 3 and w.dead_letter == "q-dead"
    # PRIORITY is per row (_commands); the rest is the same for every row.
    assert w.addjob_args() == [b"RETRY", b"10", b"BACKOFF", b"FIXED", b"500", b"MAXDELIVERIES", b"3",
                               b"DEADLETTER", b"q-dead"]
    w = parse_options({"queue": "q", "backoff": " 100 , 60000", "priorityColumn": "p"}, WRITE_MODE)
    assert w.backoff == (100, 60000) and w.priority_column == "p" and w.priority is None
    assert w.addjob_args() == [b"BACKOFF", b"EXP", b"100", b"60000"]
    # DEADLETTER alone is the node's to refuse (unless it has a default).
    assert parse_options({"queue": "q", "deadLetter": "d"}, WRITE_MODE).addjob_args() == [b"DEADLETTER", b"d"]
    plain = parse_options({"queue": "q"}, WRITE_MODE)
    assert plain.priority is plain.backoff is plain.max_deliveries is plain.dead_letter is None
    assert plain.addjob_args() == []


def test_extension_options_of_streaming_reads():
    o = parse_options({"queue": "a,b", "nackDelayMs": "60000", "maxDeliveries": "2"}, STREAM_READ_MODE)
    assert o.nack_delay_ms == 60000 and o.max_deliveries == 2 and o.dead_letter is None
    assert o.dead_letter_queue("a") == "a:dead" and o.dead_letter_queue("b") == "b:dead"
    o = parse_options({"queue": "a", "nackDelayMs": "0", "maxDeliveries": "1", "deadLetter": "poison"},
                      STREAM_READ_MODE)
    assert o.nack_delay_ms == 0 and o.dead_letter_queue("a") == "poison"
    o = parse_options({"queue": "a", "nackDelayMs": "100"}, STREAM_READ_MODE)
    assert o.nack_delay_ms == 100 and o.max_deliveries is None


@pytest.mark.parametrize("raw, mode, message", [
    ({"queue": "q", "priority": "0"}, WRITE_MODE, "'priority' must be between 1 and 9, got 0"),
    ({"queue": "q", "priority": "10"}, WRITE_MODE, "'priority' must be between 1 and 9"),
    ({"queue": "q", "priority": "high"}, WRITE_MODE, "'priority' must be an integer"),
    ({"queue": "q", "priority": "5"}, STREAM_READ_MODE, "'priority' applies to writes only"),
    ({"queue": "q", "priorityColumn": " "}, WRITE_MODE, "'priorityColumn' is empty"),
    ({"queue": "q", "backoff": "0"}, WRITE_MODE, "'backoff' must be between 1 and 4294967295 ms, got 0"),
    ({"queue": "q", "backoff": "1,2,3"}, WRITE_MODE, "'backoff' must be ms (FIXED) or base-ms,max-ms (EXP)"),
    ({"queue": "q", "backoff": "fast"}, WRITE_MODE, "'backoff' must be ms (FIXED)"),
    ({"queue": "q", "backoff": "500,100"}, WRITE_MODE, "the max (100 ms) is below the base (500 ms)"),
    ({"queue": "q", "backoff": "4294967296"}, WRITE_MODE, "'backoff' must be between 1 and"),
    ({"queue": "q", "maxDeliveries": "0"}, WRITE_MODE, "'maxDeliveries' must be between 1 and"),
    ({"queue": "q", "maxDeliveries": "2"}, READ, "'maxDeliveries' applies to writes and streaming reads, not to a read"),
    ({"queue": "q", "deadLetter": "d"}, READ, "'deadLetter' applies to writes and streaming reads"),
    ({"queue": "q", "nackDelayMs": "5"}, READ, "'nackDelayMs' applies to streaming reads only"),
    ({"queue": "q", "nackDelayMs": "5"}, WRITE_MODE, "'nackDelayMs' applies to streaming reads only"),
    ({"queue": "q", "nackDelayMs": "-1"}, STREAM_READ_MODE, "'nackDelayMs' must be between 0 and"),
    ({"queue": "q", "maxDeliveries": "3"}, STREAM_READ_MODE, "'maxDeliveries' needs 'nackDelayMs'"),
    ({"queue": "q", "deadLetter": "d", "nackDelayMs": "1"}, STREAM_READ_MODE, "'deadLetter' needs 'maxDeliveries'"),
    ({"queue": "q,d", "deadLetter": "d", "maxDeliveries": "1", "nackDelayMs": "1"}, STREAM_READ_MODE,
     "the dead-letter queue 'd' (of queue 'q') is also read by this query"),
    ({"queue": "q,q:dead", "maxDeliveries": "1", "nackDelayMs": "1"}, STREAM_READ_MODE,
     "the dead-letter queue 'q:dead' (of queue 'q') is also read"),
])
def test_bad_extension_options_name_the_problem(raw, mode, message):
    with pytest.raises(OptionError) as e:
        parse_options(raw, mode)
    assert message in str(e.value) and str(e.value).startswith("disque: ")


def test_write_commands_carry_each_rows_priority():
    o = parse_options({"queue": "q", "priority": "2", "backoff": "10,20"}, WRITE_MODE)
    o.priority_column = "p"
    rows = [(None, b"a", None, None), ("q2", "b", "k", 9), (None, b"c", None, 1)]
    cmds = list(_commands(iter(rows), o, "w", 0))
    assert cmds[0][:4] == [b"ADDJOB", b"q", b"a", b"5000"]
    assert cmds[0][4:-2] == [b"BACKOFF", b"EXP", b"10", b"20", b"PRIORITY", b"2"]  # the option
    assert cmds[1][1:3] == [b"q2", b"b"] and cmds[1][4:] == [b"BACKOFF", b"EXP", b"10", b"20", b"PRIORITY", b"9",
                                                             b"DEDUP", b"k"]  # the row's value wins
    assert cmds[2][8:10] == [b"PRIORITY", b"1"]
    assert cmds[0][-2] == b"DEDUP" and cmds[0][-1] == derived_key("w", 0, 0, b"q", b"a")
    # Without the option, a row without a priority gets none (the node's default).
    bare = parse_options({"queue": "q"}, WRITE_MODE)
    assert list(_commands(iter([(None, b"a", None, None)]), bare, "w", 0))[0][4] == b"DEDUP"
    with pytest.raises(DisqueSparkError, match="row 1 of partition 3 has priority 10 .column 'p'.: it must be "
                                              "between 1 and 9"):
        list(_commands(iter([(None, b"a", None, 1), (None, b"b", None, 10)]), o, "w", 3))


def test_check_schema_finds_the_priority_column():
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    def schema(**cols):
        return StructType([StructField(n, t) for n, t in cols.items()])

    o = parse_options({"queue": "q"}, WRITE_MODE)
    check_schema(o, schema(body=StringType()))
    assert o.priority_column is None
    check_schema(o, schema(body=StringType(), priority=LongType()))
    assert o.priority_column == "priority"  # found by its name
    o = parse_options({"queue": "q", "priorityColumn": "urgency"}, WRITE_MODE)
    check_schema(o, schema(body=StringType(), urgency=IntegerType(), priority=StringType()))
    assert o.priority_column == "urgency"
    with pytest.raises(OptionError, match="column 'priority' .option 'priorityColumn'. must be tinyint or "
                                          "smallint or int or bigint, not string"):
        check_schema(parse_options({"queue": "q"}, WRITE_MODE), schema(body=StringType(), priority=StringType()))
    with pytest.raises(OptionError, match="column 'urgency' .option 'priorityColumn'. is not in the DataFrame"):
        check_schema(parse_options({"queue": "q", "priorityColumn": "urgency"}, WRITE_MODE),
                     schema(body=StringType()))


def test_spent_jobs_are_those_delivered_max_deliveries_times():
    assert not is_spent(0, 0, None) and not is_spent(100, 100, None)
    assert not is_spent(0, 0, 1) and is_spent(1, 0, 1) and is_spent(0, 1, 1)
    assert not is_spent(1, 1, 3) and is_spent(2, 1, 3) and is_spent(5, 0, 3)


def test_parse_nodes():
    assert parse_nodes("a:1, b:2,a:1,[::1]:3") == (("a", 1), ("b", 2), ("::1", 3))


def test_checkpoint_location_is_accepted():
    assert parse_options({"queue": "q", "checkpointLocation": "/x"}, WRITE_MODE).queues == ("q",)


# -- keys and node choice -----------------------------------------------------

def test_derived_keys_are_stable_and_content_bound():
    k = derived_key("w", 3, 7, b"q", b"body")
    assert k == derived_key("w", 3, 7, b"q", b"body")
    assert k.startswith(b"w/3/7/") and len(k.split(b"/")[-1]) == 12
    # Same place, other content: another key (a reordered retry never takes
    # another row's key).
    assert k != derived_key("w", 3, 7, b"q", b"other")
    assert k != derived_key("w", 3, 7, b"q2", b"body")
    assert content_hash(b"ab", b"c") != content_hash(b"a", b"bc")
    assert derived_key("w", 3, 8, b"q", b"body") != k
    assert derived_key("w2", 3, 7, b"q", b"body") != k


def test_user_keys():
    assert user_key("k") == b"k" and user_key(b"\x00") == b"\x00"
    with pytest.raises(ValueError):
        user_key("")
    with pytest.raises(ValueError):
        user_key("x" * 1025)


def test_node_order_is_a_stable_rotation():
    nodes = ["h:3", "h:1", "h:2"]
    orders = {tuple(node_order(nodes, "w", p)) for p in range(50)}
    for order in orders:
        i = order.index("h:1")
        assert order[i:] + order[:i] == ("h:1", "h:2", "h:3")
    assert len({o[0] for o in orders}) == 3  # partitions spread over the nodes
    assert node_order(nodes, "w", 5) == node_order(list(reversed(nodes)), "w", 5)
    assert stream_write_id("qid", "4") == "qid/4"


def test_key_order_depends_only_on_the_queue_and_key():
    nodes = ["h:3", "h:1", "h:2"]
    orders = {tuple(key_order(nodes, b"q", b"k%d" % i)) for i in range(50)}
    for order in orders:
        i = order.index("h:1")
        assert order[i:] + order[:i] == ("h:1", "h:2", "h:3")
    assert len({o[0] for o in orders}) == 3  # keys spread over the nodes
    assert key_order(nodes, b"q", b"k") == key_order(list(reversed(nodes)), b"q", b"k")
    # The queue is length-prefixed: ("ab", "c") and ("a", "bc") are two pairs.
    firsts = {key_order(nodes, b"ab", b"c%d" % i)[0] == key_order(nodes, b"a", b"bc%d" % i)[0] for i in range(50)}
    assert firsts == {True, False}


def test_rows_with_one_user_key_meet_on_one_node_from_any_partition_or_write(tmp_path):
    """Three nodes that share nothing: a key sent by two partitions of two
    writes makes one job only if both reach the same node, which is what
    routing by key guarantees (the partitions' own nodes differ here)."""
    procs = [NodeProcess(tmp_path / ("n%d" % i)).start() for i in range(3)]
    try:
        nodes = ["127.0.0.1:%d" % p.port for p in procs]
        # A second write whose partition 1 would go to another node than
        # partition 0 of the first, were rows routed per partition.
        other = next(w for w in ("write-%d" % i for i in range(100))
                     if node_order(nodes, w, 1)[0] != node_order(nodes, "write-a", 0)[0])
        o = parse_options({"queue": "unused", "queueColumn": "k", "dedupColumn": "k"}, WRITE_MODE)
        keys = [b"key-%d" % k for k in range(7)]
        rows = [(keys[i % 7].decode(), b"body-%d" % i, keys[i % 7].decode(), None) for i in range(600)]
        results = [write_partition(iter(rows), o, nodes, w, p) for w, p in (("write-a", 0), (other, 1))]
        assert [r.rows for r in results] == [600, 600]
        assert [total_qlen(procs, k) for k in keys] == [1] * 7
        homes = {key_order(nodes, k, k)[0] for k in keys}
        assert [set(r.node.split(",")) for r in results] == [homes, homes]
        # A key's node down: its rows go to the next node of the key's order.
        dead = key_order(nodes, keys[0], keys[0])[0]
        procs[nodes.index(dead)].stop()
        moved = [k for k in keys if key_order(nodes, k, k)[0] == dead]
        again = [(k.decode(), b"again", k.decode(), None) for k in keys]
        assert write_partition(iter(again), o, nodes, "write-b", 0).rows == 7
        alive = [p for p in procs if "127.0.0.1:%d" % p.port != dead]
        assert [total_qlen(alive, k) for k in moved] == [1] * len(moved)
        assert [qlen(procs[nodes.index(key_order(nodes, k, k)[1])], k) for k in moved] == [1] * len(moved)
    finally:
        for p in procs:
            p.stop()


# -- offsets and partition planning --------------------------------------------

def _id(node, n):
    return "D-%s-%s-05a1" % (node, ("%024d" % n))


def test_offsets_round_trip_through_json():
    jobs = {"h:2": [_id("bbbbbbbb", 1)], "h:1": [_id("aaaaaaaa", 2), _id("aaaaaaaa", 3)], "h:3": []}
    end = make_offset(4, jobs)
    assert json.loads(json.dumps(end)) == end == {"seq": 4, "jobs": {"h:2": jobs["h:2"], "h:1": jobs["h:1"]}}
    assert job_count(end) == 3 and job_count(initial_offset()) == 0
    # ~45 bytes of offset log per job.
    big = make_offset(1, {"127.0.0.1:7711": [_id("aaaaaaaa", i) for i in range(1000)]})
    assert 43000 <= len(json.dumps(big)) <= 45000


def test_plan_partitions_is_deterministic_and_complete():
    end = make_offset(9, {"h:2": [_id("b" * 8, i) for i in range(5)], "h:1": [_id("a" * 8, i) for i in range(3)]})
    parts = plan_partitions(end, per_partition=2)
    assert parts == plan_partitions(json.loads(json.dumps(end)), per_partition=2)
    assert [a for a, _ in parts] == ["h:1", "h:1", "h:2", "h:2", "h:2"]
    assert sum((ids for _, ids in parts), []) == end["jobs"]["h:1"] + end["jobs"]["h:2"]
    assert plan_partitions(initial_offset()) == []
    blob = pack_ids(end["jobs"]["h:2"])
    assert len(blob) == 200 and [i.decode() for i in unpack_ids(blob)] == end["jobs"]["h:2"]


def test_assign_jobs_gives_every_id_to_one_node():
    a, b, c = (_id("aaaaaaaa", 1).encode(), _id("bbbbbbbb", 2).encode(), _id("cccccccc", 3).encode())
    listed = [("h:1", "aaaaaaaa" + "0" * 32, [a, b]),
              ("h:2", "bbbbbbbb" + "0" * 32, [a, b, c]),
              ("h:3", "dddddddd" + "0" * 32, [c])]
    got = assign_jobs(listed)
    assert got == {"h:1": [a], "h:2": [b, c], "h:3": []}
    flat = sum(got.values(), [])
    assert sorted(flat) == sorted({a, b, c})


# -- connection and discovery against a real node ---------------------------------

def test_discover_and_errors(node, tmp_path):
    nodes = discover([("127.0.0.1", free_port()), ("127.0.0.1", node.port)], None)
    assert [a for a, _ in nodes] == ["127.0.0.1:%d" % node.port]
    dead = free_port()
    with pytest.raises(ConnectError) as e:
        discover([("127.0.0.1", dead)], None)
    assert "no reachable node among 127.0.0.1:%d" % dead in str(e.value)
    with Connection("127.0.0.1", node.port) as c:
        replies = c.pipeline([("PING",)] * 1000 + [("NOSUCH",)], window=64)
        assert replies[:1000] == [b"PONG"] * 1000 and "unknown command" in str(replies[-1]).lower()


def test_password_errors(tmp_path):
    n = NodeProcess(tmp_path / "auth", args=["--requirepass", "secret"]).start()
    try:
        with pytest.raises(AuthError, match="AUTH failed on node .*invalid password"):
            discover([("127.0.0.1", n.port)], "wrong")
        with pytest.raises(AuthError, match="requires a password"):
            discover([("127.0.0.1", n.port)], None)
        assert discover([("127.0.0.1", n.port)], "secret")
    finally:
        n.stop()


# -- the stream reader's offset methods, by hand ----------------------------------

def _reader(node, queue="sq", **extra):
    return stream_reader(node, queue, **extra)


def test_stream_reader_batches_commit_and_the_closing_empty_batch(node):
    ids = add_jobs(node, "sq", [b"j%d" % i for i in range(5)])
    r = _reader(node)
    try:
        start = r.initialOffset()
        end1 = r.latestOffset(start, ReadMaxRows(3))
        assert end1["seq"] == 1 and job_count(end1) == 3 and qlen(node, "sq") == 2
        assert r.latestOffset(start, ReadMaxRows(3)) == end1  # same start: same batch
        got = [i.encode() for i in end1["jobs"]["127.0.0.1:%d" % node.port]]
        assert all(show(node, i)[b"state"] == b"active" for i in got)
        # Fetching does not ACK: only commit does.
        end2 = r.latestOffset(end1, ReadMaxRows(3))
        assert job_count(end2) == 2 and all(show(node, i)[b"state"] == b"active" for i in got)
        r.commit(end1)
        assert all(show(node, i) is None or show(node, i)[b"state"] == b"acked" for i in got)
        # No new jobs, but end2's jobs await their commit: one empty batch.
        end3 = r.latestOffset(end2, ReadMaxRows(3))
        assert end3 == {"seq": 3, "jobs": {}}
        r.commit(end2)
        # Nothing left and nothing awaiting: no batch (start returned).
        assert r.latestOffset(end3, ReadMaxRows(3)) == end3
        assert all(show(node, i) is None or show(node, i)[b"state"] == b"acked" for i in ids)
        # A restarted reader does not know end2 was committed: it asks for
        # one empty batch so that Spark commits it (again).
        r2 = _reader(node)
        assert r2.latestOffset(end2, ReadMaxRows(3)) == {"seq": 3, "jobs": {}}
        r2.stop()
    finally:
        r.stop()


def test_partitions_carry_rows_or_ids_and_read_the_same_jobs(node):
    add_jobs(node, "sq", [b"x%d" % i for i in range(7)])
    r = _reader(node)
    try:
        end = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
        parts = r.partitions(r.initialOffset(), end)
        assert [p.rows is not None for p in parts] == [True]
        cached = [b.to_pylist() for p in parts for b in read_partition(p)]
        # Another process (a restarted query) has no cache: SHOW by ID.
        r2 = _reader(node)
        parts2 = r2.partitions(r.initialOffset(), end)
        assert [p.rows for p in parts2] == [None]
        shown = [b.to_pylist() for p in parts2 for b in read_partition(p)]
        r2.stop()
        assert [row["id"] for row in cached[0]] == [row["id"] for row in shown[0]] == end["jobs"][parts[0].addr]
        assert sorted(row["body"] for row in cached[0]) == sorted(b"x%d" % i for i in range(7))
        assert [row["body"] for row in cached[0]] == [row["body"] for row in shown[0]]
        assert all(row["state"] == "active" and row["retry"] == 300 for row in cached[0])
    finally:
        r.stop()


def test_working_heartbeat_keeps_jobs_from_being_requeued(node):
    add_jobs(node, "sq", [b"h%d" % i for i in range(4)], "RETRY", 1)
    r = _reader(node, workinginterval="5")
    try:
        end = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
        assert job_count(end) == 4 and qlen(node, "sq") == 0
        time.sleep(3.0)  # three RETRY periods: the heartbeat (every 0.5 s) holds them
        assert qlen(node, "sq") == 0
    finally:
        r.stop()
    # Without it they come back after their RETRY.
    deadline = time.time() + 5
    while qlen(node, "sq") < 4 and time.time() < deadline:
        time.sleep(0.1)
    assert qlen(node, "sq") == 4


# -- dead letters and NACK on stop, by hand ---------------------------------------

def _deliver_again(node, queue, times):
    """GETJOB then NACK every job of ``queue``, ``times`` times (each NACK
    counts a delivery)."""
    for _ in range(times):
        jobs = call(node, "GETJOB", "NOHANG", "COUNT", 100, "FROM", queue)
        call(node, "NACK", *[j[1] for j in jobs])


def test_fetch_moves_jobs_delivered_max_deliveries_times_to_the_dead_letter_queue(node):
    spent = add_jobs(node, "dq", [b"poison"])[0]
    _deliver_again(node, "dq", 2)  # nacks 2: delivered twice
    fresh = add_jobs(node, "dq", [b"fine"])[0]
    r = _reader(node, queue="dq", maxDeliveries="2", nackDelayMs="60000")
    try:
        end = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
        # Only the fresh job reaches Spark; the spent one is in dq:dead, keyed
        # by its ID, and acknowledged.
        assert end["jobs"] == {"127.0.0.1:%d" % node.port: [fresh.decode()]}
        state = show(node, spent)
        assert state is None or state[b"state"] == b"acked"
        dead = call(node, "QPEEK", "dq:dead", 10)
        assert [(j[0], j[2]) for j in dead] == [(b"dq:dead", b"poison")]
        # Its DEDUP key is the original's ID: moving it again adds nothing.
        assert call(node, "ADDJOB", "dq:dead", b"poison", 0, "DEDUP", spent) == dead[0][1]
        assert qlen(node, "dq:dead") == 1
    finally:
        r.stop()


def test_fetch_below_the_limit_hands_every_job_to_spark(node):
    ids = add_jobs(node, "dq2", [b"a", b"b"])
    _deliver_again(node, "dq2", 2)
    r = _reader(node, queue="dq2", maxDeliveries="3", nackDelayMs="60000", deadLetter="graveyard")
    try:
        end = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
        assert sorted(end["jobs"]["127.0.0.1:%d" % node.port]) == sorted(i.decode() for i in ids)
        assert qlen(node, "graveyard") == 0
    finally:
        r.stop()


def test_replayed_batch_moves_spent_jobs_instead_of_reading_them(node):
    """A restarted query replays a batch by ID: the counters of SHOW decide."""
    ids = add_jobs(node, "dq3", [b"p0", b"p1", b"p2"])
    r = _reader(node, queue="dq3", maxDeliveries="1", nackDelayMs="60000", deadLetter="dq3-dead")
    end = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
    r._pending.clear()  # as if the driver died: no NACK on stop
    r.stop()
    assert job_count(end) == 3
    # One job of the batch was NACKed meanwhile (a failed attempt): spent.
    call(node, "NACK", ids[1])
    r2 = _reader(node, queue="dq3", maxDeliveries="1", nackDelayMs="60000", deadLetter="dq3-dead")
    try:
        parts = r2.partitions(r2.initialOffset(), end)
        assert [p.rows for p in parts] == [None] and parts[0].dead == (1, "dq3-dead")
        read = [row for p in parts for b in read_partition(p) for row in b.to_pylist()]
        assert sorted(row["body"] for row in read) == [b"p0", b"p2"]
        assert [(j[0], j[2]) for j in call(node, "QPEEK", "dq3-dead", 10)] == [(b"dq3-dead", b"p1")]
        state = show(node, ids[1])
        assert state is None or state[b"state"] == b"acked"
        # A task retry reads the same jobs and moves nothing twice.
        again = [row for p in parts for b in read_partition(p) for row in b.to_pylist()]
        assert sorted(row["body"] for row in again) == [b"p0", b"p2"] and qlen(node, "dq3-dead") == 1
    finally:
        r2._pending.clear()
        r2.stop()


def test_stop_nacks_uncommitted_jobs_with_the_delay(node):
    ids = add_jobs(node, "nq", [b"n%d" % i for i in range(5)], "RETRY", 60)
    r = _reader(node, queue="nq", nackDelayMs="1500")
    end1 = r.latestOffset(r.initialOffset(), ReadMaxRows(2))
    end2 = r.latestOffset(end1, ReadMaxRows(2))
    r.commit(end1)  # committed: ACKed, never NACKed
    t0 = time.monotonic()
    r.stop()  # end2 was not committed (its batch failed, or the query stopped)
    nacked = [i.encode() for i in end2["jobs"]["127.0.0.1:%d" % node.port]]
    assert len(nacked) == 2 and set(nacked) <= set(ids)
    for job_id in nacked:
        state = show(node, job_id)
        assert int(state[b"nacks"]) == 1 and b"redeliver-at" in state
    assert qlen(node, "nq") == 1  # not back yet: their RETRY is 60 s, the delay 1.5 s
    wait_for(lambda: qlen(node, "nq") == 3, 5, what="the NACKed jobs back after nackDelayMs")
    assert time.monotonic() - t0 >= 1.3
    for job_id in (i.encode() for i in end1["jobs"]["127.0.0.1:%d" % node.port]):
        state = show(node, job_id)
        assert state is None or state[b"state"] == b"acked"


def test_stop_without_nack_delay_leaves_jobs_to_their_retry(node):
    add_jobs(node, "nq2", [b"a", b"b"], "RETRY", 60)
    r = _reader(node, queue="nq2")
    end = r.latestOffset(r.initialOffset(), ReadMaxRows(10))
    r.stop()
    for job_id in end["jobs"]["127.0.0.1:%d" % node.port]:
        state = show(node, job_id.encode())
        assert state[b"state"] == b"active" and int(state[b"nacks"]) == 0


def test_sigterm_unwinds_once_so_that_stop_runs():
    """Spark ends the source's process with SIGTERM: the first one becomes
    SystemExit (PySpark's runner then calls reader.stop()), later ones are
    ignored while stop() sends its NACKs."""
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _stop_on_sigterm()
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # ignored
        # A handler of someone else's is left alone.
        mine = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGTERM, mine)
        _stop_on_sigterm()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
