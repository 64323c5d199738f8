"""Deduplication keys and node choice for writes (pure functions).

A write sends every row as ``ADDJOB ... DEDUP <key>``.  The key is the
user's ``dedupColumn`` value when given, else derived from the write and the
row's place in it::

    <write id>/<partition id>/<row index>/<hash of queue and body>

Invariants:

* the same write id, partition, row index, queue and body always give the
  same key, in any process (no ``hash()``: it is salted per process);
* two rows with different queue or body never share a derived key, even
  if a retried task sees its rows in another order: a reordered retry can
  at worst add a duplicate, never map a row onto another row's key (which
  would drop that row);
* :func:`node_order` is a rotation of the sorted node list that depends
  only on (write id, partition id): a retried task tries the same node
  first, and the next ones in the same order when it is down;
* :func:`key_order` is such a rotation that depends only on (queue, user
  key): every row with one ``dedupColumn`` value, in any partition of any
  write, goes to the same node while it is up.  Two partitions sending one
  key at once to two nodes would race (each node adds its own job before
  the other's copy arrives); sent to one node, the second ADDJOB finds the
  first job.
"""

import hashlib
from typing import List, Sequence

MAX_KEY_LEN = 1024


def content_hash(queue: bytes, body: bytes) -> str:
    """12 hex chars of BLAKE2b over the queue (length-prefixed) and body."""
    h = hashlib.blake2b(digest_size=6)
    h.update(b"%d:" % len(queue))
    h.update(queue)
    h.update(body)
    return h.hexdigest()


def derived_key(write_id: str, partition: int, index: int, queue: bytes, body: bytes) -> bytes:
    return ("%s/%d/%d/%s" % (write_id, partition, index, content_hash(queue, body))).encode()


def user_key(value) -> bytes:
    """A ``dedupColumn`` value (str or bytes) as a key; ValueError when
    empty or longer than the server accepts."""
    key = value.encode() if isinstance(value, str) else bytes(value)
    if not 0 < len(key) <= MAX_KEY_LEN:
        raise ValueError("disque: dedupColumn value must be 1..%d bytes, got %d bytes" % (MAX_KEY_LEN, len(key)))
    return key


def stream_write_id(query_id: str, batch_id) -> str:
    """Write id of one micro-batch of a streaming write: the same after a
    restart from the checkpoint (the query id is stored there, and a
    replayed batch keeps its id)."""
    return "%s/%s" % (query_id, batch_id)


def _rotation(nodes: Sequence[str], seed: bytes) -> List[str]:
    """``sorted(nodes)`` rotated to start at a node picked by hashing ``seed``."""
    ordered = sorted(nodes)
    if not ordered:
        return []
    digest = hashlib.blake2b(seed, digest_size=8).digest()
    start = int.from_bytes(digest, "big") % len(ordered)
    return ordered[start:] + ordered[:start]


def node_order(nodes: Sequence[str], write_id: str, partition: int) -> List[str]:
    """The nodes in the order a partition of a write tries them."""
    return _rotation(nodes, ("%s/%d" % (write_id, partition)).encode())


def key_order(nodes: Sequence[str], queue: bytes, key: bytes) -> List[str]:
    """The nodes in the order a row with a user key tries them."""
    return _rotation(nodes, b"%d:%s%s" % (len(queue), queue, key))
