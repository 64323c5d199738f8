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


class BatchRows:
    """Accumulates SHOW replies into batch-read RecordBatches."""

    def __init__(self):
        self.cols = [[] for _ in ARROW]

    def __len__(self):
        return len(self.cols[0])

    def add_show(self, reply):
        f = show_fields(reply)
        row = (_text(f["id"]), _text(f["queue"]), f.get("body") or b"", _text(f["state"]),
               int(f["repl"]), (int(f["ctime"]) // 1000000) * 1000, int(f["ttl"]), int(f["retry"]),
               int(f["nacks"]), int(f["additional-deliveries"]))
        for col, v in zip(self.cols, row):
            col.append(v)

    def flush(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(self.cols, ARROW)], schema=ARROW)
        self.cols = [[] for _ in ARROW]
        return batch


def stream_row(job_id: str, queue: str, body: bytes, retry, nacks: int, deliveries: int) -> tuple:
    """A streaming-read row (see the module docstring for the nulls)."""
    return (job_id, queue, body, "active", None, None, None, retry, nacks, deliveries)


def stream_batches(rows):
    """RecordBatches from :func:`stream_row` tuples."""
    for i in range(0, len(rows), ARROW_BATCH_ROWS):
        cols = list(zip(*rows[i:i + ARROW_BATCH_ROWS]))
        yield pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, ARROW)], schema=ARROW)


def stream_row_from_show(reply) -> tuple:
    f = show_fields(reply)
    return stream_row(_text(f["id"]), _text(f["queue"]), f.get("body") or b"", int(f["retry"]),
                      int(f["nacks"]), int(f["additional-deliveries"]))
