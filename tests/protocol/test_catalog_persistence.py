"""The catalog across restarts, on whole nodes in memory: what a node
wrote to its AOF (kill -9 leaves every write the kernel was given: the
files as they are) brings its catalog entries back, after appends, a
BGREWRITEAOF, ``CONFIG SET appendonly yes`` and a controlled restart; and
a change is acknowledged only once its record is on disk."""

import shutil

from tests.support.aof_files import records_on_disk
from tests.support.memory import Node, cmd
from tests.support.storage_faults import FaultyFileSystem

ENTRIES = [(b"limit", b"q", b"rate=50"), (b"schedule", b"nightly", b"0 3 * * *"), (b"limit", b"old", b"")]


def change(node, kind, name, value):
    """A change made on ``node`` in a batch of its own, as a command makes
    it (the batch's end writes the AOF)."""
    runtime = node.runtime
    runtime.set_time()
    entry = runtime.node.settings.change(kind, name, value)
    runtime.after_batch()
    return entry


def killed(node, workdir, **directives):
    """A node started on a copy of ``node``'s files as they are now (what
    kill -9 of its process leaves), with ``directives``."""
    shutil.copytree(node.dir, str(workdir))
    return Node(workdir, {"appendonly": "yes", **directives})


def catalog(node):
    return dict(node.runtime.node.settings.catalog.entries)


def rewritten(node):
    """Wait (bounded) for the rewrite in progress to end."""
    persistence = node.service.persistence
    for _ in range(1000):
        if persistence.rewriting is None:
            break
        node.reactor.advance(0.01)
    assert persistence.rewriting is None and persistence.last_rewrite_status == "ok"


def test_a_killed_node_has_its_catalog_back_tombstones_included(make, tmp_path):
    node = make(appendonly="yes")
    for kind, name, value in ENTRIES:
        change(node, kind, name, value)
    change(node, b"limit", b"q", b"rate=70")
    restarted = killed(node, tmp_path / "restarted")
    assert catalog(restarted) == catalog(node) and len(catalog(node)) == 3
    settings = restarted.runtime.node.settings
    assert settings.get(b"limit", b"q").value == b"rate=70" and settings.get(b"limit", b"old") is None
    assert settings.catalog.entries[(b"limit", b"old")].deleted
    restarted.service.stopService()


def test_the_catalog_survives_a_bgrewriteaof_and_what_is_appended_after_it(make, tmp_path):
    node = make(appendonly="yes")
    for kind, name, value in ENTRIES:
        change(node, kind, name, value)
    conn = node.connect()
    assert conn.call("ADDJOB", "q", "body", "0").startswith(b"+D-")
    assert conn.call("BGREWRITEAOF") == b"+Background append only file rewriting started\r\n"
    rewritten(node)
    change(node, b"schedule", b"nightly", b"")
    restarted = killed(node, tmp_path / "restarted")
    assert catalog(restarted) == catalog(node)
    assert restarted.runtime.node.settings.get(b"schedule", b"nightly") is None
    restarted.service.stopService()


def test_appendonly_switched_on_writes_the_catalog_held_in_memory(make, tmp_path):
    node = make()
    for kind, name, value in ENTRIES:
        change(node, kind, name, value)
    assert node.connect().call("CONFIG", "SET", "appendonly", "yes") == b"+OK\r\n"
    rewritten(node)
    restarted = killed(node, tmp_path / "restarted")
    assert catalog(restarted) == catalog(node) and len(catalog(node)) == 3
    restarted.service.stopService()


def test_a_controlled_restart_keeps_the_catalog_without_appendonly(make, tmp_path):
    node = make()
    for kind, name, value in ENTRIES:
        change(node, kind, name, value)
    conn = node.connect()
    assert conn.call("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"+OK\r\n"
    conn.call("SHUTDOWN", "REWRITE-AOF")
    restarted = killed(node, tmp_path / "restarted", appendonly="no")
    assert catalog(restarted) == catalog(node) and len(catalog(node)) == 3
    restarted.service.stopService()


def test_a_schedule_change_is_acknowledged_only_once_its_record_is_on_disk(make, tmp_path):
    """A full disk holds SCHEDULE's reply as it holds ADDJOB's: no +OK
    leaves for a catalog entry that is not in the file."""
    node = make(appendonly="yes", appendfsync="always")
    fs = FaultyFileSystem()
    node.service.persistence.fs = fs
    conn = node.connect()
    fs.full(room=20)
    conn.proto.dataReceived(cmd("SCHEDULE", "ADD", "nightly", "sq", "body", "CRON", "0 3 * * *"))
    assert conn.take() == b""
    assert [argv for argv in records_on_disk(node) if argv[0] == b"CATALOG"] == []
    node.advance(1.0)  # retried every tick: still full
    assert conn.take() == b""
    fs.free()
    node.advance(0.2)  # the next tick writes the kept record, and the reply leaves
    assert conn.take() == b"+OK\r\n"
    assert [argv[0] for argv in records_on_disk(node)] == [b"CATALOG"]
    restarted = killed(node, tmp_path / "restarted")
    assert restarted.connect().call("SCHEDULE", "LIST") == b"*1\r\n$7\r\nnightly\r\n"
    restarted.service.stopService()
