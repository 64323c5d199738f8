"""The catalog: the settings every node of the cluster keeps alike.

Schedules (:mod:`disque.core.recurring`) and queue limits (rate and concurrency,
:mod:`disque.core.qlimits`) are not jobs: a node does not own them, every
node needs them, and a change made on any node must reach the others and
survive restarts.  The catalog holds them as entries keyed by ``(kind,
name)``, and each node keeps a copy:

* **Changes converge.** An entry carries a ``stamp`` and the node that made
  it (``origin``).  Of two entries for one key, the one with the greater
  ``(stamp, origin)`` wins on every node, whatever the order they arrive
  in (:func:`newer`); equal pairs are the same change.  A node making a
  change stamps it past the entry it replaces and not behind its clock
  (:meth:`Catalog.next_stamp`): later changes win when clocks agree, and
  concurrent ones (a partition) are ordered the same way everywhere.
* **Deleting** writes a *tombstone*: an entry with an empty ``value``.  It
  wins over older entries like any change, so a deletion is not undone by
  a node that still holds the old entry.  Tombstones are kept (an entry is
  some tens of bytes; the count of names ever used is small).
* **Progress** entries (kind ``fired``: the last run of a schedule) use the
  same rule with the run's time as ``stamp``: the latest run wins.

The core module holds no transport: :meth:`Catalog.merge` takes entries
from anywhere (a peer's CATALOG message, the AOF at load, a command here)
and reports which ones changed something; the node
sends, persists and applies them.

Entries are bytes end to end (``kind``, ``name``, ``origin`` and
``value``); the value's layout belongs to its kind's module.  The one
encoding, for the bus and the AOF alike::

    version:u8 (1)  stamp:u64  kind:u8+bytes  name:u16+bytes
    origin:40 bytes  value:u32+bytes
"""

import hashlib
import struct
from typing import NamedTuple

ENTRY_VERSION = 1
MAX_KIND_LEN = 32
MAX_NAME_LEN = 1024  # a queue name or a schedule name
MAX_VALUE_LEN = 1 << 20
NODE_ID_LEN = 40
_HEAD = struct.Struct(">BQ")


class BadEntry(ValueError):
    """Bytes that are no catalog entry."""


class Entry(NamedTuple):
    kind: bytes
    name: bytes
    stamp: int  # u64: ms-based logical time, or a run's time (progress)
    origin: bytes  # the 40-char ID of the node that made this version
    value: bytes  # the kind's encoding; b"" for a deletion (a tombstone)

    @property
    def deleted(self) -> bool:
        return not self.value

    @property
    def key(self):
        return (self.kind, self.name)


def newer(a: Entry, b) -> bool:
    """True when ``a`` wins over ``b`` (an Entry or None) for the same key."""
    return b is None or (a.stamp, a.origin) > (b.stamp, b.origin)


def encode_entry(entry: Entry) -> bytes:
    kind, name, value = entry.kind, entry.name, entry.value
    return b"".join((_HEAD.pack(ENTRY_VERSION, entry.stamp), struct.pack(">B", len(kind)), kind,
                     struct.pack(">H", len(name)), name, entry.origin, struct.pack(">I", len(value)), value))


def decode_entry(data: bytes) -> Entry:
    """The entry :func:`encode_entry` made; raises :class:`BadEntry` for
    anything else (a truncated or padded record, an unknown version, fields
    out of their bounds)."""
    stamp, kind, name, pos = _head(data)
    try:
        origin = bytes(data[pos:pos + NODE_ID_LEN])
        pos += NODE_ID_LEN
        (n,) = struct.unpack_from(">I", data, pos)
        value = bytes(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    except (struct.error, IndexError):
        raise BadEntry("truncated catalog entry") from None
    if pos != len(data):
        raise BadEntry("catalog entry of %d bytes, %d expected" % (len(data), pos))
    entry = Entry(kind, name, stamp, origin, value)
    check(entry)
    return entry


def entry_key(data: bytes):
    """``(kind, name)`` of the entry ``data`` encodes, read without the rest
    (to name an entry whose later bytes are damaged); raises
    :class:`BadEntry` if even they cannot be read."""
    _, kind, name, _ = _head(data)
    return kind, name


def _head(data):
    """``(stamp, kind, name, pos)``: the fields up to the name, and where
    the origin starts."""
    try:
        version, stamp = _HEAD.unpack_from(data, 0)
        if version != ENTRY_VERSION:
            raise BadEntry("unknown catalog entry version %d" % version)
        pos = _HEAD.size
        n = data[pos]
        kind = bytes(data[pos + 1:pos + 1 + n])
        pos += 1 + n
        (n,) = struct.unpack_from(">H", data, pos)
        name = bytes(data[pos + 2:pos + 2 + n])
        pos += 2 + n
    except (struct.error, IndexError):
        raise BadEntry("truncated catalog entry") from None
    return stamp, kind, name, pos


def check(entry: Entry) -> None:
    """Raise :class:`BadEntry` unless every field is within its bounds."""
    if not 0 < len(entry.kind) <= MAX_KIND_LEN or not 0 < len(entry.name) <= MAX_NAME_LEN:
        raise BadEntry("catalog entry kind or name of a bad length")
    if len(entry.origin) != NODE_ID_LEN or not entry.origin.isalnum():
        raise BadEntry("catalog entry origin is no node ID")
    if len(entry.value) > MAX_VALUE_LEN or not 0 <= entry.stamp < 1 << 64:
        raise BadEntry("catalog entry value or stamp out of bounds")


class Catalog:
    """One node's copy of the catalog: the winning entry per key.

    Invariant: ``self.entries[key]`` is the greatest ``(stamp, origin)``
    entry for ``key`` ever merged here (so merging is commutative,
    associative and idempotent: every node that merged the same entries
    holds the same catalog, in any order)."""

    def __init__(self):
        self.entries = {}  # (kind, name) -> Entry

    def __len__(self):
        return len(self.entries)

    def get(self, kind: bytes, name: bytes):
        """The live entry for ``(kind, name)``, None if none or deleted."""
        entry = self.entries.get((kind, name))
        return None if entry is None or entry.deleted else entry

    def next_stamp(self, kind: bytes, name: bytes, now: int) -> int:
        """The stamp of a change made here now: past the entry it replaces
        (tombstones included), and not behind this node's clock."""
        entry = self.entries.get((kind, name))
        return max(now, entry.stamp + 1 if entry is not None else 0)

    def merge(self, entry: Entry) -> bool:
        """Keep ``entry`` if it wins over what is held for its key; True if
        it did (the caller applies, persists and passes it on)."""
        key = (entry.kind, entry.name)
        if not newer(entry, self.entries.get(key)):
            return False
        self.entries[key] = entry
        return True

    def digest(self) -> bytes:
        """A summary of the whole catalog: equal on two nodes iff they hold
        the same entries (up to a hash collision)."""
        h = hashlib.sha1()
        for key in sorted(self.entries):
            e = self.entries[key]
            h.update(b"%d\x00%b\x00%b\x00%d\x00%b\x00" % (len(e.kind), e.kind, e.name, e.stamp, e.origin))
        return h.digest()

    def clear(self) -> None:
        self.entries.clear()
