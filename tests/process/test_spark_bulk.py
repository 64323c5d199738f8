"""The connector's bulk paths pinned to its generic ones (no SparkSession):
writes encoded per Arrow batch (disque/spark/encode.py) against the
row-at-a-time commands, SHOW replies read by position against by name,
pre-encoded pipelines, streaming partitions as Arrow IPC, and the
``fastAck`` option."""


import pyarrow as pa
import pytest

from disque.resp.command import encode_command
from disque.spark.connection import Connection, DisqueSparkError, ServerError
from disque.spark.encode import encoded_requests, fast_path_applies, id_requests
from disque.spark.offsets import job_count
from disque.spark.options import STREAM_READ_MODE, WRITE_MODE, OptionError, parse_options
from disque.spark.schema import BatchRows, arrow_blob, blob_batches, stream_batches, stream_row
from disque.spark.stream_read import read_partition
from disque.spark.write import _commands, _rows_from_arrow, write_arrow, write_partition
from pyspark.sql.streaming.datasource import ReadMaxRows

from tests.support.process import call, show
from tests.support.spark import add_jobs, qlen, stream_reader

BODIES = ["plain", "", "ünïcødé ✓", "x" * 300, "a\r\nb$3\r\n"]


def _batches(bodies, binary=False, size=3):
    col = pa.array([b.encode() for b in bodies] if binary else bodies, type=pa.binary() if binary else pa.string())
    return pa.table({"other": list(range(len(bodies))), "body": col}).to_batches(max_chunksize=size)


@pytest.mark.parametrize("raw", [
    {"queue": "q"},
    {"queue": "qüé", "replicate": "2", "retry": "3", "ttl": "60", "delay": "1", "async": "true",
     "priority": "7", "backoff": "5,10", "maxdeliveries": "4", "deadletter": "dl", "timeout": "0"},
    {"queue": "q", "bodycolumn": "body", "priority": "1"},
])
@pytest.mark.parametrize("binary", [False, True])
def test_bulk_write_requests_are_the_generic_paths_bytes(raw, binary):
    o = parse_options(raw, WRITE_MODE)
    assert fast_path_applies(o)
    batches = _batches(BODIES * 3, binary)
    fast = [r for group in encoded_requests(batches, o, "write-id", 5) for r in group]
    generic = [encode_command(c) for c in _commands(_rows_from_arrow(batches, o), o, "write-id", 5)]
    assert fast == generic and len(fast) == 15


def test_bulk_write_fails_on_the_same_null_body_as_the_generic_path():
    o = parse_options({"queue": "q"}, WRITE_MODE)
    batches = pa.table({"body": ["a", "b", "c", None, "e"]}).to_batches(max_chunksize=2)
    with pytest.raises(DisqueSparkError) as fast:
        [r for g in encoded_requests(batches, o, "w", 1) for r in g]
    with pytest.raises(DisqueSparkError) as generic:
        list(_commands(_rows_from_arrow(batches, o), o, "w", 1))
    assert str(fast.value) == str(generic.value) == \
        "disque: row 3 of partition 1 has a null body (column 'body')"


@pytest.mark.parametrize("raw", [{"queue": "q", "queuecolumn": "body"}, {"queue": "q", "dedupcolumn": "body"},
                                 {"queue": "q", "prioritycolumn": "other"}])
def test_per_row_columns_take_the_generic_path(raw):
    assert not fast_path_applies(parse_options(raw, WRITE_MODE))


def test_id_requests_are_encode_commands_bytes():
    ids = [b"D-0f4e2a9c-5bd1f2c3a4b5c6d7e8f90a1b-05a1", "D-0f4e2a9c-5bd1f2c3a4b5c6d7e8f90a1b-05a2", "é", b""]
    assert id_requests(b"WORKING", ids) == [encode_command(("WORKING", i)) for i in ids]


def test_bulk_write_adds_what_a_retry_on_the_generic_path_finds(trio):
    """Same keys, same node: a task retried on the generic path (a
    streaming write without Arrow) adds nothing the bulk path added."""
    nodes = ["127.0.0.1:%d" % n.port for n in trio]
    o = parse_options({"queue": "bulkq"}, WRITE_MODE)
    first = write_arrow(_batches(BODIES * 40, size=64), o, nodes, "write-bulk", 2)
    again = write_partition(_rows_from_arrow(_batches(BODIES * 40, size=7), o), o, nodes, "write-bulk", 2)
    assert (first.rows, again.rows, first.node) == (200, 200, again.node)
    assert sum(qlen(n, "bulkq") for n in trio) == 200


def test_stream_encoded_answers_in_order_whatever_the_window(node):
    with Connection("127.0.0.1", node.port) as conn:
        groups = [[encode_command(("PING", "%d-%d" % (g, i))) for i in range(n)] for g, n in enumerate((1, 7, 0, 20))]
        groups[2] = [encode_command(("NOSUCHCOMMAND",))]
        replies = list(conn.stream_encoded(groups, 4))
    assert len(replies) == 29 and isinstance(replies[8], ServerError)
    assert [r for r in replies if not isinstance(r, ServerError)] == \
        [b"%d-%d" % (g, i) for g, n in ((0, 1), (1, 7), (3, 20)) for i in range(n)]


def test_show_replies_read_by_position_are_those_read_by_name(node):
    ids = add_jobs(node, "bq", [b"one", b"two", b""])
    ids += add_jobs(node, "bq", [b"prio"], "PRIORITY", 8, "BACKOFF", "FIXED", 100, "DEDUP", "k1")
    call(node, "GETJOB", "NOHANG", "COUNT", 1, "FROM", "bq")
    replies = [call(node, "SHOW", i) for i in ids]
    by_position = BatchRows()
    by_position.add_shows(replies)
    assert len(by_position) == 4 and by_position.layout is not None
    shuffled = BatchRows()  # every reply's pairs in another order: read by name
    shuffled.add_shows([[x for k in range(len(r) - 2, -1, -2) for x in r[k:k + 2]] for r in replies])
    mixed = BatchRows()  # the layout of the first reply, the others by name
    mixed.add_shows(replies[:1] + [[x for k in range(len(r) - 2, -1, -2) for x in r[k:k + 2]] for r in replies[1:]])
    a, b, c = by_position.flush().to_pylist(), shuffled.flush().to_pylist(), mixed.flush().to_pylist()
    assert a == b == c
    first = show(node, ids[0])
    assert a[0]["id"] == ids[0].decode() and a[0]["body"] == b"one" and a[2]["body"] == b""
    assert a[0]["state"] == first[b"state"].decode() and a[0]["retry"] == first[b"retry"]
    assert a[0]["ctime"].timestamp() * 1000 == first[b"ctime"] // 1000000
    assert {r["state"] for r in a} == {"queued", "active"}


def test_streaming_rows_as_arrow_ipc_are_the_rows():
    rows = [stream_row("D-%038d" % i, "q", b"b%d" % i, 30 if i % 2 else None, i, 0) for i in range(5000)]
    direct = [r for b in stream_batches(rows) for r in b.to_pylist()]
    assert [r for b in blob_batches(arrow_blob(rows)) for r in b.to_pylist()] == direct
    assert len(list(blob_batches(arrow_blob(rows)))) == 2  # ARROW_BATCH_ROWS per batch


def _reader(node, queue="fq", **extra):
    return stream_reader(node, queue, **extra)


def test_fast_ack_option():
    assert parse_options({"queue": "q"}, STREAM_READ_MODE).fast_ack is False
    assert parse_options({"queue": "q", "FASTACK": "true"}, STREAM_READ_MODE).fast_ack is True
    with pytest.raises(OptionError, match="'fastAck' applies to streaming reads only"):
        parse_options({"queue": "q", "fastack": "true"}, WRITE_MODE)
    with pytest.raises(OptionError, match="'fastAck' must be true or false"):
        parse_options({"queue": "q", "fastack": "maybe"}, STREAM_READ_MODE)


@pytest.mark.parametrize("fast", [False, True])
def test_commit_acknowledges_with_ackjob_or_fastack(node, fast):
    ids = add_jobs(node, "fq", [b"f%d" % i for i in range(6)])
    r = _reader(node, fastack=str(fast).lower())
    try:
        end = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
        assert job_count(end) == 6
        rows = [row for p in r.partitions(r.initialOffset(), end) for b in read_partition(p) for row in b.to_pylist()]
        assert sorted(row["body"] for row in rows) == sorted(b"f%d" % i for i in range(6))
        assert all(show(node, i)[b"state"] == b"active" for i in ids)
        r.commit(end)
        # FASTACK deletes the job at once; ACKJOB leaves it acked until
        # the cluster's garbage collection (at once on a lone node, or not).
        states = [show(node, i) for i in ids]
        if fast:
            assert states == [None] * 6
        else:
            assert all(s is None or s[b"state"] == b"acked" for s in states)
        assert qlen(node, "fq") == 0
    finally:
        r.stop()


def test_a_streaming_read_of_a_limited_queue_goes_at_the_limits_pace(node):
    """QLIMIT CONCURRENCY paces the streaming read like any consumer: a
    trigger gets what the limit allows, its jobs stay in flight until the
    commit's ACK, and the next trigger gets the next ones."""
    add_jobs(node, "lq", [b"l%d" % i for i in range(7)])
    assert call(node, "QLIMIT", "lq", "CONCURRENCY", "3") == b"OK"
    r = _reader(node, queue="lq")
    try:
        start, seen = r.initialOffset(), []
        for want in (3, 3, 1):
            end = r.latestOffset(start, ReadMaxRows(100))
            assert job_count(end) == want
            rows = [row for p in r.partitions(start, end) for b in read_partition(p) for row in b.to_pylist()]
            seen += [row["body"] for row in rows]
            if want == 3:  # nothing more for anyone while these are in flight
                assert call(node, "GETJOB", "NOHANG", "FROM", "lq") is None
            r.commit(end)
            start = end
        assert sorted(seen) == sorted(b"l%d" % i for i in range(7))
    finally:
        r.stop()
