"""Batch read: the jobs in the cluster now, not consumed.

Planning (driver, :meth:`BatchReader.partitions`): every reachable node is
JSCANned (``REPLY ID``, each queue, states queued and active) and every ID
is assigned to ONE node that listed it (:func:`assign_jobs`).  Each Spark
partition is one node and carries that node's assigned IDs as one blob of
40-byte IDs.  Reading (executor, :meth:`BatchReader.read`): pipelined SHOW
of those IDs on that node; IDs gone by then are skipped.

Invariant: every job listed by at least one node appears in exactly one
partition, so the DataFrame holds each job once although several nodes
hold copies of it.
"""

from typing import Dict, List, Sequence, Tuple

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .connection import Connection, ConnectError, ServerError, discover, refusal, split_address
from .encode import id_requests
from .offsets import pack_ids, unpack_ids
from .schema import ARROW_BATCH_ROWS, BatchRows

SCAN_COUNT = 1000
SHOW_WINDOW = 512


def assign_jobs(listed: Sequence[Tuple[str, str, Sequence[bytes]]]) -> Dict[str, List[bytes]]:
    """``listed``: [(address, node_id, ids the node holds)] in a stable node
    order.  Each ID goes to the node that created it (the 8 hex chars after
    ``D-`` are the start of its node ID) when that node listed it, else to
    the first node in ``listed`` order that did.  Returns {address: ids}
    with every ID exactly once, IDs in listing order."""
    holders = {}
    for addr, _, ids in listed:
        for job_id in ids:
            holders.setdefault(job_id, []).append(addr)
    prefix_of = {addr: node_id[:8] for addr, node_id, _ in listed}
    out = {addr: [] for addr, _, _ in listed}
    for job_id, addrs in holders.items():
        creator = job_id[2:10].decode() if isinstance(job_id, bytes) else job_id[2:10]
        owner = next((a for a in addrs if prefix_of[a] == creator), addrs[0])
        out[owner].append(job_id)
    return out


def scan_ids(conn: Connection, queues: Sequence[str]) -> List[bytes]:
    """IDs of the queued and active jobs of ``queues`` on one node (each once)."""
    seen = {}
    for queue in queues:
        cursor = b"0"
        while True:
            try:
                reply = conn.call("JSCAN", cursor, "COUNT", SCAN_COUNT, "QUEUE", queue,
                                  "STATE", "queued", "STATE", "active", "REPLY", "ID")
            except ServerError as e:
                raise refusal("JSCAN", conn, e) from None
            cursor, ids = reply[0], reply[1]
            for job_id in ids:
                seen[job_id] = None
            if cursor == b"0":
                break
    return list(seen)


class NodePartition(InputPartition):
    """One node's share of a batch read: its address and a blob of IDs."""

    def __init__(self, addr: str, ids: bytes):
        super().__init__(addr)
        self.addr = addr
        self.ids = ids


class BatchReader(DataSourceReader):
    def __init__(self, options):
        self.options = options

    def partitions(self):
        opts = self.options
        nodes = discover(opts.nodes, opts.password, opts.username)
        listed = []
        for addr, node_id in nodes:
            host, port = split_address(addr)
            try:
                conn = Connection(host, port, opts.password, username=opts.username)
            except ConnectError:
                continue  # a failing node: its jobs are read from their other copies
            with conn:
                listed.append((addr, node_id, scan_ids(conn, opts.queues)))
        assigned = assign_jobs(listed)
        return [NodePartition(addr, pack_ids(assigned[addr])) for addr, _, _ in listed]

    def read(self, partition):
        ids = unpack_ids(partition.ids)
        if not ids:
            return
        host, port = split_address(partition.addr)
        rows = BatchRows()
        with Connection(host, port, self.options.password, username=self.options.username) as conn:
            for start in range(0, len(ids), ARROW_BATCH_ROWS):
                replies = list(conn.stream_encoded([id_requests(b"SHOW", ids[start:start + ARROW_BATCH_ROWS])],
                                                   SHOW_WINDOW))
                for reply in replies:
                    if isinstance(reply, ServerError):
                        raise refusal("SHOW", conn, reply)
                rows.add_shows([r for r in replies if r is not None])  # None: gone since planning
                if len(rows):
                    yield rows.flush()
