"""Streaming offsets and their partitions (pure functions).

An offset is the JSON-able dict ``{"seq": n, "jobs": {"host:port": [id, ...]}}``
holding the IDs of ONE micro-batch, grouped by the node they were fetched
from.  Spark writes each batch's end offset to the checkpoint's offset log
before running the batch, so any batch can be replayed by ID after a
restart.  Invariants:

* ``seq`` grows by one per batch the source creates, so two consecutive
  offsets always differ, even when both hold no jobs;
* ``jobs`` lists each ID once; nodes and IDs keep the order they were
  fetched in, and :func:`plan_partitions` depends on the offset only, so a
  planned batch (or a task retry) reads exactly the same jobs.
"""

from typing import Dict, List, Tuple

JOBS_PER_PARTITION = 10000


def initial_offset() -> dict:
    return {"seq": 0, "jobs": {}}


def make_offset(seq: int, jobs: Dict[str, List[str]]) -> dict:
    return {"seq": int(seq), "jobs": {addr: list(ids) for addr, ids in jobs.items() if ids}}


def offset_seq(offset) -> int:
    return int((offset or {}).get("seq", 0))


def offset_jobs(offset) -> Dict[str, List[str]]:
    return dict((offset or {}).get("jobs") or {})


def job_count(offset) -> int:
    return sum(len(ids) for ids in offset_jobs(offset).values())


def plan_partitions(end, per_partition: int = JOBS_PER_PARTITION) -> List[Tuple[str, List[str]]]:
    """[(node address, [ids])] for the batch ending at ``end``: each node's
    IDs in chunks of at most ``per_partition``, nodes in sorted order."""
    out = []
    for addr in sorted(offset_jobs(end)):
        ids = end["jobs"][addr]
        for i in range(0, len(ids), per_partition):
            out.append((addr, list(ids[i:i + per_partition])))
    return out


def pack_ids(ids) -> bytes:
    """IDs (str or bytes, 40 bytes each) as one blob."""
    blob = b"".join(i.encode() if isinstance(i, str) else i for i in ids)
    if len(blob) != 40 * len(ids):
        raise ValueError("job IDs must be 40 bytes each")
    return blob


def unpack_ids(blob: bytes) -> List[bytes]:
    return [blob[i:i + 40] for i in range(0, len(blob), 40)]
