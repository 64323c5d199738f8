"""The executor side of the streaming read: what one partition of a batch
carries (:class:`StreamPartition`) and how a worker turns it into rows
(:func:`read_partition`: the rows kept from GETJOB, or the jobs SHOWn by ID
when a restarted query replays a batch), with the dead-letter move of jobs
delivered too often (:func:`is_spent`, :func:`move_to_dead_letters`).  It
runs in executor processes: everything it needs is in the partition.  The
driver side, which fetches, plans and acknowledges, is
:mod:`disque.spark.stream_read`."""

import sys
from typing import List

from pyspark.sql.datasource import InputPartition

from .connection import Connection, ConnectError, ServerError, check_auth, refusal, split_address
from .offsets import unpack_ids
from .options import dead_letter_queue
from .schema import blob_batches, show_fields, stream_batches, stream_row_from_show

ACK_CHUNK = 500              # IDs per ACKJOB (and NACK)
DEAD_LETTER_TIMEOUT_MS = 5000  # ADDJOB ms-timeout of a dead letter


def warn(msg):
    """One line on the process's stderr (Spark keeps it in the executor or driver log)."""
    print("disque.spark: " + msg, file=sys.stderr)


class StreamPartition(InputPartition):
    """Part of one batch: the node its jobs were fetched from, their IDs (a
    blob of 40-byte IDs), the rows when known as one Arrow IPC stream
    (:func:`~.schema.arrow_blob`; else None: read SHOWs the IDs), every
    node's address (fallback for SHOW) and the credentials."""

    def __init__(self, addr, ids, rows, nodes, password, dead=None, username=None):
        super().__init__(addr)
        self.addr = addr
        self.ids = ids
        self.rows = rows
        self.nodes = nodes
        self.password = password
        self.username = username
        self.dead = dead  # (maxDeliveries, deadLetter or None) when set


def is_spent(nacks: int, deliveries: int, max_deliveries) -> bool:
    """True when a job with these counters was delivered ``max_deliveries``
    times already (the first delivery, plus one per NACK or additional
    delivery): it must not be delivered again."""
    return max_deliveries is not None and 1 + nacks + deliveries > max_deliveries


def move_to_dead_letters(conn, jobs, dead_letter) -> List[str]:
    """Move ``jobs`` ([(id, queue, body)]) to their dead-letter queue on
    ``conn``'s node: ADDJOB with DEDUP <id> (a retry, or another process
    moving the same job, adds it once), then ACKJOB the ones added.
    Returns the IDs moved; the others are left as they are (warned)."""
    if not jobs:
        return []
    replies = conn.pipeline([("ADDJOB", dead_letter_queue(dead_letter, queue), body, DEAD_LETTER_TIMEOUT_MS,
                              "DEDUP", job_id) for job_id, queue, body in jobs], 256)
    moved = []
    for (job_id, queue, _), reply in zip(jobs, replies):
        if isinstance(reply, ServerError):
            check_auth(reply, conn.addr)
            warn("could not move job %s of queue %s to %s on %s: %s (it is delivered as usual)"
                 % (job_id, queue, dead_letter_queue(dead_letter, queue), conn.addr, reply))
        else:
            moved.append(job_id)
    if moved:
        acks = conn.pipeline([("ACKJOB", *moved[i:i + ACK_CHUNK]) for i in range(0, len(moved), ACK_CHUNK)], 64)
        for reply in acks:
            if isinstance(reply, ServerError):
                warn("ACKJOB of dead-lettered jobs on %s: %s" % (conn.addr, reply))
        warn("moved %d job(s) delivered too often to their dead-letter queue on %s" % (len(moved), conn.addr))
    return moved


def read_partition(partition: StreamPartition):
    """RecordBatches of the partition's jobs, in its ID order.  Without
    rows: SHOW on the partition's node, then on the other nodes for IDs it
    does not hold; jobs gone or already acknowledged are skipped, and with
    ``maxDeliveries`` jobs delivered that often are moved to their
    dead-letter queue (on the node that showed them) instead."""
    if partition.rows is not None:
        yield from blob_batches(partition.rows)
        return
    ids = unpack_ids(partition.ids)
    found = {}
    moved = set()
    max_deliveries, dead_letter = partition.dead or (None, None)
    order = [partition.addr] + [a for a in partition.nodes if a != partition.addr]
    missing = ids
    for addr in order:
        if not missing:
            break
        host, port = split_address(addr)
        here = {}
        try:
            with Connection(host, port, partition.password, username=partition.username) as conn:
                replies = conn.pipeline([("SHOW", i) for i in missing], 512)
                for job_id, reply in zip(missing, replies):
                    if isinstance(reply, ServerError):
                        raise refusal("SHOW", conn, reply)
                    if reply is not None:
                        here[job_id] = reply
                spent = _spent(here, max_deliveries)
                if spent:
                    moved.update(i.encode() for i in move_to_dead_letters(conn, spent, dead_letter))
        except ConnectError as e:
            if not here:
                continue
            warn("moving jobs to their dead-letter queue on %s failed (%s): they are delivered as usual" % (addr, e))
        found.update(here)
        missing = [i for i in missing if i not in found]
    rows = []
    for job_id in ids:
        reply = found.get(job_id)
        if reply is None or job_id in moved:
            continue
        fields = dict(zip(reply[::2], reply[1::2]))
        if fields.get(b"state") == b"acked":
            continue
        rows.append(stream_row_from_show(reply))
    yield from stream_batches(rows)


def _spent(shown, max_deliveries):
    """[(id, queue, body)] of the SHOW replies (``{id: reply}``) of jobs not
    acknowledged and delivered ``max_deliveries`` times already."""
    if max_deliveries is None:
        return []
    out = []
    for job_id, reply in shown.items():
        f = show_fields(reply)
        if f.get("state") != b"acked" and is_spent(int(f["nacks"]), int(f["additional-deliveries"]),
                                                   max_deliveries):
            out.append((job_id.decode(), f["queue"].decode("utf-8", "replace"), f.get("body") or b""))
    return out
