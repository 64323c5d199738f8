"""Deduplication keys: ``ADDJOB ... DEDUP <key>`` (an extension of this
project; the original has no such option).

A producer that retries an ADDJOB (a Spark task run again, a client that
lost the reply) sends the same key again and gets the ID of the job it
already added instead of a second job.  A key is unique within its queue,
on the nodes holding a copy of the job: it travels with the job to its
replicas (bus records) and into the AOF, so a retry sent to any node that
holds a copy gets the existing ID.  Nodes that never held the job do not
know the key: two ADDJOBs with one key sent to two nodes that share no copy
make two jobs.

:class:`DedupIndex` answers "was this key used?" for one node:

* ``live[(queue, key)]`` is a registered job whose ``queue`` and ``dedup``
  are that pair.  At most one job per pair: the first registered wins (a
  copy of another node's job with the same key is kept as a job, but the
  key keeps pointing to the first).
* ``gone[(queue, key)] = (job_id, left_ms)``: a job that was accepted
  and then left this node (acknowledged and collected, expired, deleted,
  moved away by federation), remembered for ``window`` ms so that a retry
  after the job was consumed still adds nothing.  A job that was never
  accepted (its synchronous replication failed) leaves no trace: a retry
  must add it again, or the row would be lost.
* ``gone`` entries expire in the order they were added (``_expiry``), so
  forgetting costs O(1) per entry; the window is read when a key is looked
  up or expired, so changing it (CONFIG SET dedup-window) applies to the
  keys already remembered.

Nothing here reads a clock: callers pass ``now`` (ms).
"""

from collections import deque

DEFAULT_WINDOW_S = 600
MAX_KEY_LEN = 1024
TOMBSTONE_OVERHEAD = 370  # bytes per remembered key (entries, tuples, ID, a 32-byte key: measured), for INFO used_memory


class DedupIndex:
    __slots__ = ("live", "gone", "_expiry", "window")

    def __init__(self, window_ms: int = DEFAULT_WINDOW_S * 1000):
        self.live = {}
        self.gone = {}
        self._expiry = deque()  # (left_ms, (queue, key)), oldest first
        self.window = window_ms

    def find(self, queue: bytes, key: bytes, now: int):
        """The live job with this key, else the ID of a job that had it
        within the window (bytes), else None."""
        pair = (queue, key)
        job = self.live.get(pair)
        if job is not None:
            return job
        entry = self.gone.get(pair)
        if entry is not None and now < entry[1] + self.window:
            return entry[0]
        return None

    def add(self, job) -> None:
        """Index a job that carries a key (new, replicated, imported or
        loaded).  A pair already taken by another job keeps that job."""
        pair = (job.queue, job.dedup)
        if pair not in self.live:
            self.live[pair] = job
            self.gone.pop(pair, None)

    def remove(self, job, now: int, remember: bool) -> None:
        """``job`` left this node; with ``remember`` its key keeps
        answering with its ID for the window."""
        pair = (job.queue, job.dedup)
        if self.live.get(pair) is not job:
            return
        del self.live[pair]
        if remember and self.window > 0:
            self.gone[pair] = (job.id, now)
            self._expiry.append((now, pair))

    def expire(self, now: int) -> None:
        """Forget keys whose window has passed (run by the node's tick)."""
        expiry = self._expiry
        gone = self.gone
        horizon = now - self.window
        while expiry and expiry[0][0] <= horizon:
            left, pair = expiry.popleft()
            entry = gone.get(pair)
            if entry is not None and entry[1] == left:
                del gone[pair]

    def forget_oldest(self, count: int) -> int:
        """Drop up to ``count`` remembered keys, oldest first (memory
        pressure: they only guard against a late duplicate).  Returns how
        many went."""
        dropped = 0
        expiry = self._expiry
        gone = self.gone
        while expiry and dropped < count:
            left, pair = expiry.popleft()
            entry = gone.get(pair)
            if entry is not None and entry[1] == left:
                del gone[pair]
                dropped += 1
        return dropped

    def clear(self) -> None:
        self.live.clear()
        self.gone.clear()
        self._expiry.clear()
