"""The DataFrame schema of the ``disque`` source and its Arrow builders.

Spark asks a Python data source for ONE schema before it says whether the
read is a batch or a stream, so both use the same columns::

    id string, queue string, body binary, state string, repl int,
    ctime timestamp, ttl int, retry int, nacks bigint,
    additional_deliveries bigint

Batch read: every column is set from SHOW.  ``ctime`` is the creation time
(the server's ``ctime`` is ms * 10^6 plus a counter: the counter is
dropped); ``ttl`` is the seconds the job has left to live.

Streaming read: ``id``, ``queue``, ``body``, ``nacks`` and
``additional_deliveries`` come from GETJOB WITHCOUNTERS, ``state`` is
``active`` (the job was just delivered) and ``retry`` is the job's RETRY
(WORKING's reply); ``repl``, ``ctime`` and ``ttl`` are null.

Every builder yields ``pyarrow.RecordBatch``es of at most
:data:`ARROW_BATCH_ROWS` rows matching :data:`ARROW` column for column.
"""

from operator import itemgetter

import pyarrow as pa

ARROW_BATCH_ROWS = 4096

DDL = ("id string, queue string, body binary, state string, repl int, ctime timestamp, "
       "ttl int, retry int, nacks bigint, additional_deliveries bigint")

ARROW = pa.schema([
    ("id", pa.string()), ("queue", pa.string()), ("body", pa.binary()), ("state", pa.string()),
    ("repl", pa.int32()), ("ctime", pa.timestamp("us", tz="UTC")), ("ttl", pa.int32()),
    ("retry", pa.int32()), ("nacks", pa.int64()), ("additional_deliveries", pa.int64()),
])


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def show_fields(reply) -> dict:
    """SHOW's flat key/value reply -> {str key: value}."""
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


#: SHOW's fields of the batch read's columns, in :data:`ARROW` order.
SHOW_COLUMNS = (b"id", b"queue", b"body", b"state", b"repl", b"ctime", b"ttl", b"retry", b"nacks",
                b"additional-deliveries")


class ShowLayout:
    """Where SHOW puts :data:`SHOW_COLUMNS` in its flat reply, learnt from
    one reply: a node sends its fields in one order, so a reply whose
    names up to the last field used are the same (``matches``) is read by
    position (``values``, one C-level ``itemgetter``); any other reply is
    read by name (:func:`show_values`)."""

    def __init__(self, reply):
        names = reply[0::2]
        self.positions = tuple(2 * names.index(n) + 1 for n in SHOW_COLUMNS)
        self.span = max(self.positions)
        self.names = reply[0:self.span:2]
        self.values = itemgetter(*self.positions)

    def matches(self, reply) -> bool:
        return reply[0:self.span:2] == self.names


def show_values(reply) -> tuple:
    """:data:`SHOW_COLUMNS` of a SHOW reply, by name (a missing body is None)."""
    f = dict(zip(reply[0::2], reply[1::2]))
    return tuple(f.get(n) for n in SHOW_COLUMNS)


def _text_column(values, type_):
    """A string column from bytes, invalid UTF-8 replaced as ``_text`` does."""
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_text(v) for v in values], type=type_)


def _int_column(values, type_):
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # a server that sends numbers as strings
        return pa.array([int(v) for v in values], type=type_)


class BatchRows:
    """Accumulates SHOW replies into batch-read RecordBatches, column by
    column: the row-at-a-time work is one slice compare and one
    ``itemgetter`` per reply (:class:`ShowLayout`)."""

    def __init__(self):
        self.rows = []
        self.layout = None

    def __len__(self):
        return len(self.rows)

    def add_shows(self, replies):
        """Add SHOW replies (each a flat list, none of them null)."""
        if not replies:
            return
        layout = self.layout
        if layout is None:
            try:
                layout = self.layout = ShowLayout(replies[0])
            except ValueError:  # a field is missing: read every reply by name
                self.rows.extend(show_values(r) for r in replies)
                return
        matches, values, rows = layout.matches, layout.values, self.rows
        rows.extend(values(r) if matches(r) else show_values(r) for r in replies)

    def add_show(self, reply):
        self.add_shows([reply])

    def flush(self) -> pa.RecordBatch:
        ids, queues, bodies, states, repls, ctimes, ttls, retries, nacks, deliveries = zip(*self.rows)
        self.rows = []
        t = [f.type for f in ARROW]
        ctime_us = [(int(c) // 1000000) * 1000 for c in ctimes]
        arrays = [_text_column(ids, t[0]), _text_column(queues, t[1]),
                  pa.array([b or b"" for b in bodies], type=t[2]), _text_column(states, t[3]),
                  _int_column(repls, t[4]), pa.array(ctime_us, type=t[5]), _int_column(ttls, t[6]),
                  _int_column(retries, t[7]), _int_column(nacks, t[8]), _int_column(deliveries, t[9])]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW)


def stream_row(job_id: str, queue: str, body: bytes, retry, nacks: int, deliveries: int) -> tuple:
    """A streaming-read row (see the module docstring for the nulls)."""
    return (job_id, queue, body, "active", None, None, None, retry, nacks, deliveries)


def stream_batches(rows):
    """RecordBatches from :func:`stream_row` tuples."""
    for i in range(0, len(rows), ARROW_BATCH_ROWS):
        cols = list(zip(*rows[i:i + ARROW_BATCH_ROWS]))
        yield pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, ARROW)], schema=ARROW)


def arrow_blob(rows) -> bytes:
    """:func:`stream_row` tuples as one Arrow IPC stream (of
    :func:`stream_batches`): what a streaming partition carries to its
    task, which only has to map it (:func:`blob_batches`)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ARROW) as writer:
        for batch in stream_batches(rows):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def blob_batches(blob: bytes):
    """The RecordBatches of an :func:`arrow_blob`."""
    return pa.ipc.open_stream(blob)


def stream_row_from_show(reply) -> tuple:
    f = show_fields(reply)
    return stream_row(_text(f["id"]), _text(f["queue"]), f.get("body") or b"", int(f["retry"]),
                      int(f["nacks"]), int(f["additional-deliveries"]))
