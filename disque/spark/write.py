"""Writes: every row becomes one job, ``ADDJOB queue body timeout [options]
[PRIORITY p] DEDUP <key>`` (``p`` from the row's priority column, else the
``priority`` option), pipelined (up to :data:`WINDOW` requests in flight per task),
every reply checked (an error reply fails the task with the server's
message).

No duplicates from task retries: each row's DEDUP key (see :mod:`.keys`) is
the same in every attempt of its task, and every attempt sends the
partition's rows to the same node (:func:`.keys.node_order`) while it is
up, so a node that already added a row answers the retry with the existing
job's ID instead of adding it again.  With ``dedupColumn``, each row goes
to the node of its (queue, key) instead (:func:`.keys.key_order`), so rows
with one key in several partitions or writes, even at the same moment,
meet on one node and make one job.  The write id in the keys is

* batch write: a UUID made on the driver when the writer is created; the
  same writer object is pickled to every task attempt;
* streaming write: ``<query id>/<batch id>`` from the task's local
  properties (``sql.streaming.queryId``, ``streaming.sql.batchId``), which
  a query restarted from its checkpoint keeps for a replayed batch.
"""

import itertools
import uuid
from typing import Iterator, List, Optional

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamWriter,
                                    WriterCommitMessage)

from .connection import Connection, ConnectError, DisqueSparkError, ServerError, refusal, split_address
from .encode import encoded_requests, fast_path_applies
from .keys import derived_key, key_order, node_order, stream_write_id, user_key
from .options import PRIORITY_MAX, PRIORITY_MIN, OptionError

try:  # PySpark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase
    _STREAM_ARROW = True
except ImportError:  # pragma: no cover
    _StreamBase = DataSourceStreamWriter
    _STREAM_ARROW = False

WINDOW = 256


class WriteResult(WriterCommitMessage):
    """What one task wrote: its partition, node and number of rows."""

    def __init__(self, partition: int, node: Optional[str], rows: int):
        self.partition, self.node, self.rows = partition, node, rows

    def __repr__(self):
        return "WriteResult(partition=%d, node=%r, rows=%d)" % (self.partition, self.node, self.rows)


INTEGER_TYPES = ("tinyint", "smallint", "int", "bigint")
PRIORITY_COLUMN = "priority"


def check_schema(options, schema):
    """Raise :class:`OptionError` unless the columns the options name exist
    with usable types (body: string or binary; queue: string; dedup:
    string or binary; priority: an integer type).  A column named
    ``priority`` is each row's priority unless ``priorityColumn`` names
    another: ``options.priority_column`` is set to it."""
    fields = {f.name: f.dataType.simpleString() for f in schema.fields}
    wanted = [(options.body_column, "bodyColumn", ("string", "binary"))]
    if options.queue_column:
        wanted.append((options.queue_column, "queueColumn", ("string",)))
    if options.dedup_column:
        wanted.append((options.dedup_column, "dedupColumn", ("string", "binary")))
    if options.priority_column is None and PRIORITY_COLUMN in fields:
        options.priority_column = PRIORITY_COLUMN
    if options.priority_column:
        wanted.append((options.priority_column, "priorityColumn", INTEGER_TYPES))
    for column, option, types in wanted:
        if column not in fields:
            raise OptionError("disque: column '%s' (option '%s') is not in the DataFrame (columns: %s)"
                              % (column, option, ", ".join(fields) or "none"))
        if fields[column] not in types:
            raise OptionError("disque: column '%s' (option '%s') must be %s, not %s"
                              % (column, option, " or ".join(types), fields[column]))


def _bytes(v):
    return v.encode() if isinstance(v, str) else bytes(v)


def _rows_from_arrow(batches, options):
    """(queue or None, body, user key or None, priority or None) per row of
    Arrow batches."""
    for batch in batches:
        names = batch.schema.names
        body = batch.column(names.index(options.body_column)).to_pylist()
        n = len(body)

        def column(name):
            return batch.column(names.index(name)).to_pylist() if name else [None] * n
        yield from zip(column(options.queue_column), body, column(options.dedup_column),
                       column(options.priority_column))


def _rows_from_rows(rows, options):
    for row in rows:
        d = row.asDict()
        yield (d.get(options.queue_column) if options.queue_column else None,
               d[options.body_column],
               d.get(options.dedup_column) if options.dedup_column else None,
               d.get(options.priority_column) if options.priority_column else None)


def _commands(rows, options, write_id: str, partition: int):
    default_queue = options.queues[0].encode() if options.queues else None
    timeout = b"%d" % options.timeout_ms
    extra = options.addjob_args()
    default_priority = [b"PRIORITY", b"%d" % options.priority] if options.priority is not None else []
    for index, (queue, body, dedup, priority) in enumerate(rows):
        if body is None:
            raise DisqueSparkError("disque: row %d of partition %d has a null body (column '%s')"
                                   % (index, partition, options.body_column))
        body = _bytes(body)
        q = _bytes(queue) if queue is not None else default_queue
        if not q:
            raise DisqueSparkError("disque: row %d of partition %d has no queue (column '%s' is null)"
                                   % (index, partition, options.queue_column))
        if priority is None:
            prio = default_priority
        elif PRIORITY_MIN <= priority <= PRIORITY_MAX:
            prio = [b"PRIORITY", b"%d" % priority]
        else:
            raise DisqueSparkError("disque: row %d of partition %d has priority %d (column '%s'): it must be "
                                   "between %d and %d" % (index, partition, priority, options.priority_column,
                                                          PRIORITY_MIN, PRIORITY_MAX))
        key = user_key(dedup) if dedup is not None else derived_key(write_id, partition, index, q, body)
        yield [b"ADDJOB", q, body, timeout] + extra + prio + [b"DEDUP", key]


def _connect(order: List[str], options, what: str):
    """Connection to the first reachable node of ``order``."""
    errors = []
    for addr in order:
        host, port = split_address(addr)
        try:
            return Connection(host, port, options.password, username=options.username)
        except ConnectError as e:
            errors.append(str(e))
    raise ConnectError("disque: no node reachable for %s: %s" % (what, "; ".join(errors)))


def _check(replies, conn) -> int:
    count = 0
    for reply in replies:
        if isinstance(reply, ServerError):
            raise refusal("ADDJOB", conn, reply)
        count += 1
    return count


def write_partition(rows, options, nodes: List[str], write_id: str, partition: int) -> WriteResult:
    """ADDJOB every row of one partition, sending rows as they arrive;
    raises on the first error reply.  Rows go to the partition's node, or
    with ``dedupColumn`` each to its key's node (:func:`_write_by_key`)."""
    commands = _commands(rows, options, write_id, partition)
    if options.dedup_column:
        return _write_by_key(commands, options, nodes, partition)
    with _connect(node_order(nodes, write_id, partition), options, "partition %d" % partition) as conn:
        count = _check(conn.stream(commands, WINDOW), conn)
    return WriteResult(partition, conn.addr, count)


def _write_by_key(commands, options, nodes: List[str], partition: int) -> WriteResult:
    """Each row to the first reachable node of its (queue, key): rows are
    taken :data:`WINDOW` at a time, and each node's share of them is
    pipelined on that node's connection (opened on first use)."""
    conns = {}  # first node of a key's order -> the connection its rows use
    count = 0
    try:
        while True:
            chunk = list(itertools.islice(commands, WINDOW))
            if not chunk:
                break
            shares = {}
            for cmd in chunk:
                order = key_order(nodes, cmd[1], cmd[-1])
                conn = conns.get(order[0])
                if conn is None:
                    conn = conns[order[0]] = _connect(order, options, "key %r" % cmd[-1])
                shares.setdefault(conn, []).append(cmd)
            for conn, share in shares.items():
                count += _check(conn.stream(share, WINDOW), conn)
    finally:
        for conn in set(conns.values()):
            conn.close()
    return WriteResult(partition, ",".join(sorted({c.addr for c in conns.values()})), count)


def write_arrow(batches, options, nodes: List[str], write_id: str, partition: int) -> WriteResult:
    """:func:`write_partition` of Arrow batches: the common write (one
    queue, no per-row columns but the body) is encoded in bulk per batch
    (:mod:`.encode`), to the same node and with the same keys."""
    if not fast_path_applies(options):
        return write_partition(_rows_from_arrow(batches, options), options, nodes, write_id, partition)
    with _connect(node_order(nodes, write_id, partition), options, "partition %d" % partition) as conn:
        count = _check(conn.stream_encoded(encoded_requests(batches, options, write_id, partition), WINDOW), conn)
    return WriteResult(partition, conn.addr, count)


def _task():
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        raise DisqueSparkError("disque: write() called outside a Spark task")
    return ctx


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("disque")``: the write id is made here, on the driver."""

    def __init__(self, options, nodes: List[str]):
        self.options = options
        self.nodes = nodes
        self.write_id = str(uuid.uuid4())

    def write(self, iterator: Iterator) -> WriteResult:
        partition = _task().partitionId()
        return write_arrow(iterator, self.options, self.nodes, self.write_id, partition)


class StreamWriter(_StreamBase):
    """``df.writeStream.format("disque")``: the write id of a micro-batch is
    ``<query id>/<batch id>`` from the task's local properties."""

    def __init__(self, options, nodes: List[str]):
        self.options = options
        self.nodes = nodes

    def write(self, iterator: Iterator) -> WriteResult:
        ctx = _task()
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        if not query_id or batch_id is None:
            raise DisqueSparkError("disque: the task carries no streaming query/batch id "
                                   "(sql.streaming.queryId / streaming.sql.batchId)")
        write_id = stream_write_id(query_id, batch_id)
        if _STREAM_ARROW:
            return write_arrow(iterator, self.options, self.nodes, write_id, ctx.partitionId())
        return write_partition(_rows_from_rows(iterator, self.options), self.options, self.nodes, write_id,
                               ctx.partitionId())

    def commit(self, messages, batchId):
        pass

    def abort(self, messages, batchId):
        pass
