"""A dict split in a fixed number of hash buckets, with a scan cursor.

QSCAN and JSCAN promise Redis SCAN semantics: a full iteration returns every
element present from start to end of the iteration at least once, even while
elements are added and removed, and each call does bounded work.  A plain
dict cannot resume "from position N" without walking N entries, and
positions shift on deletion.  Splitting the mapping into ``nbuckets`` dicts
by key hash makes the bucket index a stable cursor: an element never changes
bucket, so scanning buckets in index order visits every element that stays
put.  Lookups cost one extra index; memory is the same as one big dict.
"""

from itertools import chain


class BucketedDict:
    __slots__ = ("_buckets", "_mask", "_len")

    def __init__(self, nbuckets: int = 4096):
        if nbuckets & (nbuckets - 1):
            raise ValueError("nbuckets must be a power of two")
        self._buckets = [{} for _ in range(nbuckets)]
        self._mask = nbuckets - 1
        self._len = 0

    def __len__(self):
        return self._len

    def get(self, key, default=None):
        return self._buckets[hash(key) & self._mask].get(key, default)

    def __contains__(self, key):
        return key in self._buckets[hash(key) & self._mask]

    def add(self, key, value) -> bool:
        """Insert ``key``; return False (and change nothing) if present."""
        bucket = self._buckets[hash(key) & self._mask]
        if key in bucket:
            return False
        bucket[key] = value
        self._len += 1
        return True

    def pop(self, key, default=None):
        bucket = self._buckets[hash(key) & self._mask]
        if key in bucket:
            self._len -= 1
            return bucket.pop(key)
        return default

    def values(self):
        """Every value, bucket by bucket (an iterator; the walk over the
        buckets runs in C: a property test reads a small table after every
        step, where a Python loop over 4096 mostly empty buckets cost more
        than the test)."""
        return chain.from_iterable(map(dict.values, filter(None, self._buckets)))

    def clear(self):
        for bucket in self._buckets:
            bucket.clear()
        self._len = 0

    def scan(self, cursor: int, count: int, match=None, busyloop=False):
        """Return ``(next_cursor, values)``.

        Visits whole buckets from ``cursor`` on until ``count`` values were
        collected (a hint, as in Redis) or ``count * 10`` non-empty buckets
        were visited; ``next_cursor`` is 0 when the iteration is complete.
        ``match`` filters values.  Cursors past the end finish at once.
        """
        nbuckets = self._mask + 1
        if cursor < 0 or cursor >= nbuckets:
            return 0, []
        out = []
        budget = count * 10
        index = cursor
        buckets = self._buckets
        while True:
            bucket = buckets[index]
            index += 1
            if bucket:
                if match is None:
                    out.extend(bucket.values())
                else:
                    out.extend(v for v in bucket.values() if match(v))
                if not busyloop:
                    # Only non-empty buckets count as work: skipping empty
                    # ones is cheap, and a small table is returned at once.
                    budget -= 1
                    if (budget <= 0 or len(out) >= count) and index < nbuckets:
                        return index, out
            if index >= nbuckets:
                return 0, out


class JobTable(BucketedDict):
    """The job table, also counting the bytes of job bodies it holds (for
    the node's memory estimate; see ``NodeState.memory_used``)."""

    __slots__ = ("body_bytes",)

    def __init__(self, nbuckets: int = 4096):
        super().__init__(nbuckets)
        self.body_bytes = 0

    def add(self, key, value) -> bool:
        bucket = self._buckets[hash(key) & self._mask]
        if key in bucket:
            return False
        bucket[key] = value
        self._len += 1
        body = value.body
        if body:
            self.body_bytes += len(body)
        return True

    def pop(self, key, default=None):
        bucket = self._buckets[hash(key) & self._mask]
        if key in bucket:
            self._len -= 1
            value = bucket.pop(key)
            body = value.body
            if body:
                self.body_bytes -= len(body)
            return value
        return default

    def clear(self):
        super().clear()
        self.body_bytes = 0
