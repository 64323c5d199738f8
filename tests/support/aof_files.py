"""AOF files in process: a persistence on a test directory, loading a
file into a new node, the records a node's file holds, and what a test
needs around them (a reactor whose turns the test runs, the log
captured)."""

import os

from twisted.logger import formatEvent, globalLogPublisher

from disque.config import Config
from disque.core.node import NodeState
from disque.persistence import aof
from disque.persistence.scan import read_records

AOF = "disque.aof"


def config(tmp_path, **kw):
    c = Config.defaults()
    c.apply_overrides({"dir": str(tmp_path), **{k.replace("_", "-"): v for k, v in kw.items()}})
    return c


def load_file(tmp_path, **kw):
    """Load the file into a new node; returns (persistence, node)."""
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes", **kw))
    node = NodeState(b"b" * 40, now=1_000_000)
    try:
        p.load(node)
    finally:
        p.close()
    return p, node


class Turns:
    """A reactor whose callLater(0) calls wait for the test to run them
    (its clock stands still)."""

    def __init__(self):
        self.calls = []

    def seconds(self):
        return 0.0

    def callLater(self, delay, f, *args):
        self.calls.append((f, args))


class Logged:
    def __enter__(self):
        self.events = []
        globalLogPublisher.addObserver(self.events.append)
        return self

    def __exit__(self, *exc):
        globalLogPublisher.removeObserver(self.events.append)

    @property
    def lines(self):
        return [formatEvent(e) for e in self.events]


def records_on_disk(node):
    """The records in the AOF of ``node`` (a tests.support.memory.Node),
    asserting the file holds whole records only."""
    path = node.service.persistence.path
    out = []
    for argv, end in read_records(path):
        if argv is None:
            assert end == os.path.getsize(path), "a partial record in the file"
            return out
        out.append(argv)
