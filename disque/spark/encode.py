"""Rows of a write to RESP requests in bulk, one Arrow batch at a time.

:func:`write.py <disque.spark.write._commands>` is the generic path: one
row at a time, every column optional, each command a list encoded by
:func:`disque.resp.command.encode_command`.  :func:`encoded_requests` is
the fast path for the common write (one queue, no ``queueColumn``,
``dedupColumn`` or ``priorityColumn``): the part of the request that is
the same for every row is encoded once, and each row adds only its body
and its derived DEDUP key, by one bytes formatting per row over the body
column taken whole from the batch.

Invariant (pinned by tests/process/test_spark_units.py): for the same
rows, options, write id and partition, :func:`encoded_requests` yields
exactly the bytes ``encode_command`` gives for the commands of the
generic path, and fails on the same row with the same message (a null
body).
"""

import hashlib
from typing import Iterable, Iterator, List

import pyarrow as pa

from .connection import DisqueSparkError


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def fast_path_applies(options) -> bool:
    """True when every row's request differs only by body and key."""
    return not (options.queue_column or options.dedup_column or options.priority_column)


def request_parts(options) -> List[bytes]:
    """The arguments of every row's ADDJOB before the body and after it
    (up to the key): ``[queue, timeout, options..., PRIORITY p, DEDUP]``
    without the body, as the generic path orders them."""
    prio = [b"PRIORITY", b"%d" % options.priority] if options.priority is not None else []
    return [options.queues[0].encode(), b"%d" % options.timeout_ms] + options.addjob_args() + prio + [b"DEDUP"]


def _bodies(batch: pa.RecordBatch, column: str) -> list:
    """The body column as a list of bytes (a string column cast to binary:
    the same UTF-8 bytes ``str.encode`` gives)."""
    col = batch.column(batch.schema.get_field_index(column))
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary() if pa.types.is_string(col.type) else pa.large_binary())
    return col.to_pylist()


def encoded_requests(batches: Iterable[pa.RecordBatch], options, write_id: str,
                     partition: int) -> Iterator[List[bytes]]:
    """One list of encoded ADDJOB requests per Arrow batch (fast path only:
    :func:`fast_path_applies`)."""
    queue, timeout, *middle = request_parts(options)
    nargs = 2 + 2 + len(middle) + 1  # ADDJOB queue | body timeout | middle... | key
    head = b"*%d\r\n$6\r\nADDJOB\r\n" % nargs + _bulk(queue)
    tail = _bulk(timeout) + b"".join(_bulk(a) for a in middle)
    key_head = ("%s/%d/" % (write_id, partition)).encode()
    hash_head = b"%d:%s" % (len(queue), queue)  # keys.content_hash, hashed in one call
    blake2b = hashlib.blake2b
    index = 0
    for batch in batches:
        bodies = _bodies(batch, options.body_column)
        if batch.column(batch.schema.get_field_index(options.body_column)).null_count:
            bad = index + bodies.index(None)
            raise DisqueSparkError("disque: row %d of partition %d has a null body (column '%s')"
                                   % (bad, partition, options.body_column))
        out = []
        append = out.append
        for i, body in enumerate(bodies, index):
            key = b"%s%d/%s" % (key_head, i, blake2b(hash_head + body, digest_size=6).hexdigest().encode())
            append(b"%s$%d\r\n%s\r\n%s$%d\r\n%s\r\n" % (head, len(body), body, tail, len(key), key))
        index += len(bodies)
        yield out


def id_requests(command: bytes, ids) -> List[bytes]:
    """``command <id>`` encoded for each ID of ``ids`` (bytes or str): the
    requests ``encode_command((command, id))`` gives, one formatting per ID."""
    head = b"*2\r\n" + _bulk(command)
    return [b"%s$%d\r\n%s\r\n" % (head, len(i), i) if isinstance(i, bytes) else
            b"%s$%d\r\n%s\r\n" % (head, len(i.encode()), i.encode()) for i in ids]
