"""Storage faults on one node in memory (protocol tier): a full disk, short
writes, failed fsyncs and truncates, injected through the file layer
(tests/support/storage_faults.py).  What must hold: no partial record stays in
the file, nothing that acknowledges an unwritten record leaves, writes
get -MISCONF while the AOF is in error, and everything acknowledged is in
the file once the disk takes it again."""

import errno
import os
import stat

import pytest
from twisted.logger import formatEvent

from disque.persistence.aof import AOFPersistence
from disque.persistence.scan import read_records
from tests.support.aof_files import records_on_disk
from tests.support.storage_faults import FaultyFileSystem
from tests.support.memory import captured_log, cmd

MISCONF_ENOSPC = b"-MISCONF Errors writing to the AOF file: No space left on device\r\n"


def faulty(node):
    fs = FaultyFileSystem()
    node.service.persistence.fs = fs
    return fs


def job_ids_on_disk(node):
    ids = set()
    for argv in records_on_disk(node):
        if argv[0] == b"LOADJOB":
            ids.add(argv[1][argv[1].index(b"D-"):][:40])
    return ids


def info(conn, section=b"persistence"):
    text = conn.call("INFO", section.decode())
    return dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)


def add(conn, body=b"x"):
    return conn.call("ADDJOB", "q", body, "0")


def job_id(reply):
    assert reply.startswith(b"+D-"), reply
    return reply[1:-2]


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_a_full_disk_refuses_writes_and_loses_nothing_acknowledged(make, policy):
    node = make(appendonly="yes", appendfsync=policy)
    fs = faulty(node)
    producer, other = node.connect(), node.connect()
    acked = {job_id(add(producer)) for _ in range(3)}
    fs.full(room=20)  # the next write is short, then the disk is full
    with captured_log() as events:
        producer.proto.dataReceived(cmd("ADDJOB", "q", "held", "0"))
        # Its record is not in the file: no ID leaves, and no partial record stays.
        assert producer.take() == b""
        assert job_ids_on_disk(node) == acked
        # Meanwhile: writes and PING refused, reads answered.
        assert add(other) == MISCONF_ENOSPC
        assert other.call("PING") == MISCONF_ENOSPC
        assert other.call("GETJOB", "NOHANG", "FROM", "q") == MISCONF_ENOSPC
        assert other.call("QLEN", "q") == b":4\r\n"  # (the held job is queued in memory)
        fields = info(other)
        assert fields[b"aof_last_write_status"] == b"err"
        assert fields[b"aof_last_write_errno"] == b"%d" % errno.ENOSPC
        assert fields[b"aof_last_write_error"] == b"No space left on device"
        node.advance(1.0)  # retried every tick: still full
        assert producer.take() == b""
        assert add(other) == MISCONF_ENOSPC
        fs.free()
        node.advance(0.2)  # the next tick writes the kept records
    held = job_id(producer.take())
    acked.add(held)
    assert job_ids_on_disk(node) == acked
    assert info(other)[b"aof_last_write_status"] == b"ok"
    assert b"aof_last_write_errno" not in info(other)
    acked.add(job_id(add(other)))
    assert other.call("PING") == b"+PONG\r\n"
    assert job_ids_on_disk(node) == acked
    logged = [formatEvent(e) for e in events]
    assert sum("Error writing to the AOF file: No space left on device" in t for t in logged) == 1
    assert sum("AOF write error looks solved" in t for t in logged) == 1
    node.service.stopService()
    assert job_ids_on_disk(node) == acked  # and they load back
    again = make(appendonly="yes", dir=node.dir)
    c = again.connect()
    for jid in acked:
        assert c.call("SHOW", jid).startswith(b"*")


def test_a_short_write_whose_cut_fails_is_completed_by_the_next_write(make):
    node = make(appendonly="yes", appendfsync="always")
    fs = faulty(node)
    conn = node.connect()
    acked = {job_id(add(conn))}
    fs.full(room=7)
    fs.truncate_error = errno.EIO
    conn.proto.dataReceived(cmd("ADDJOB", "q", "y", "0"))
    assert conn.take() == b""
    # The 7 bytes stay (the cut failed): the file has a torn tail now...
    path = node.service.persistence.path
    assert os.path.getsize(path) == node.service.persistence.size
    fs.free()
    fs.truncate_error = None
    node.advance(0.2)
    acked.add(job_id(conn.take()))
    assert job_ids_on_disk(node) == acked  # ...completed by the rest: whole records only


def test_a_failed_fsync_is_not_retried_but_repaired_by_a_rewrite(make):
    node = make(appendonly="yes", appendfsync="always")
    fs = faulty(node)
    conn = node.connect()
    acked = {job_id(add(conn)) for _ in range(2)}
    fs.fsync_error = errno.EIO
    with captured_log() as events:
        conn.proto.dataReceived(cmd("ADDJOB", "q", "z", "0"))
        assert conn.take() == b""  # not fsynced: not acknowledged
        assert add(node.connect()) == b"-MISCONF Errors writing to the AOF file: Input/output error\r\n"
        failed = fs.failed_fsyncs
        node.advance(0.5)
        # The repair is a rewrite: it fails too while fsync fails (at most once a second).
        assert fs.failed_fsyncs <= failed + 1
        assert not [n for n in os.listdir(node.dir) if ".tmp" in n]  # no temp file left behind
        fs.fsync_error = None
        node.advance(1.5)
    acked.add(job_id(conn.take()))
    assert info(conn)[b"aof_last_write_status"] == b"ok"
    assert job_ids_on_disk(node) == acked
    logged = [formatEvent(e) for e in events]
    assert any("fsync of the AOF file failed: Input/output error" in t for t in logged)
    assert any("AOF rewritten from memory" in t for t in logged)
    acked.add(job_id(add(conn)))
    assert job_ids_on_disk(node) == acked


def test_everysec_fsyncs_the_tail_within_a_second_when_traffic_stops(make):
    node = make(appendonly="yes", appendfsync="everysec")
    fs = faulty(node)
    conn = node.connect()
    add(conn)
    node.advance(1.2)
    fd = node.service.persistence.fd
    before = fs.fsyncs.count(fd)
    add(conn)  # the last write; nothing follows
    assert not node.service.persistence.unsynced or fs.fsyncs.count(fd) == before
    node.advance(1.2)
    assert fs.fsyncs.count(fd) == before + 1
    assert not node.service.persistence.unsynced


def test_an_everysec_fsync_error_refuses_writes_until_a_rewrite(make):
    node = make(appendonly="yes", appendfsync="everysec")
    fs = faulty(node)
    conn = node.connect()
    node.advance(1.2)
    fs.fsync_error = errno.EIO
    first = job_id(add(conn))  # written: everysec answers before the fsync, as promised
    node.advance(1.2)
    assert add(conn).startswith(b"-MISCONF")
    fs.fsync_error = None
    node.advance(1.5)
    second = job_id(add(conn))
    assert {first, second} <= job_ids_on_disk(node)


def test_a_rewrite_on_a_full_disk_fails_cleanly(make):
    node = make(appendonly="yes", appendfsync="everysec")
    fs = faulty(node)
    conn = node.connect()
    acked = {job_id(add(conn)) for _ in range(5)}
    fs.full(room=0)
    assert conn.call("BGREWRITEAOF") == b"+Background append only file rewriting started\r\n"
    assert info(conn)[b"aof_last_bgrewrite_status"] == b"err"
    assert not [n for n in os.listdir(node.dir) if ".tmp" in n]
    fs.free()
    assert job_ids_on_disk(node) == acked


def test_files_holding_jobs_are_private(make):
    node = make(appendonly="yes")
    conn = node.connect()
    add(conn)
    mode = stat.S_IMODE(os.stat(node.service.persistence.path).st_mode)
    assert mode == 0o600
    assert conn.call("BGREWRITEAOF").startswith(b"+")
    node.advance(0.2)
    assert stat.S_IMODE(os.stat(node.service.persistence.path).st_mode) == 0o600


def test_appendonly_no_leaves_the_error_state(make):
    node = make(appendonly="yes")
    fs = faulty(node)
    conn = node.connect()
    fs.full()
    conn.proto.dataReceived(cmd("ADDJOB", "q", "x", "0"))
    assert conn.take() == b""
    other = node.connect()
    assert other.call("PING").startswith(b"-MISCONF")
    assert other.call("CONFIG", "SET", "appendonly", "no") == b"+OK\r\n"
    assert other.call("PING") == b"+PONG\r\n"
    assert job_id(conn.take())  # nothing is promised beyond memory now: the reply leaves


def test_the_unit_keeps_its_buffer_across_failed_writes(tmp_path):
    """AOFPersistence alone: whatever the sequence of failures, the file
    only ever holds whole records, in order, and all of them in the end."""
    from disque.config import Config

    config = Config.defaults()
    config.apply_overrides({"dir": str(tmp_path), "appendonly": "yes", "appendfsync": "no"})
    fs = FaultyFileSystem()
    p = AOFPersistence(config, fs=fs)
    p._open()
    expected = []
    for i, room in enumerate([None, 0, 5, 30, None, 1, None]):
        fs.room = room
        for k in range(3):
            record = (b"DELJOB", b"D-%02d-%d" % (i, k))
            p.append(record)
            expected.append([b"DELJOB", record[1]])
        p.flush()
        on_disk = [argv for argv, _ in read_records(p.path) if argv is not None]
        assert on_disk == expected[:len(on_disk)]
        assert os.path.getsize(p.path) == p.size
        assert (p.error is None) == (room is None)
    assert [argv for argv, _ in read_records(p.path) if argv is not None] == expected
    p.close()


def test_the_node_file_is_saved_again_after_a_failed_write(make):
    node = make()
    fs = FaultyFileSystem()
    node.runtime.nodefile.files = fs
    conn = node.connect()
    path = node.runtime.nodefile.path
    before = open(path, "rb").read()
    fs.full()
    with captured_log() as events:
        assert conn.call("CLUSTER", "LEAVING", "yes") == b"+OK\r\n"
        # The cluster stays dirty: the old file is whole, no temp file is left.
        assert node.runtime.node.cluster.dirty
        assert open(path, "rb").read() == before
        assert not [n for n in os.listdir(node.dir) if ".tmp" in n]
        assert info(conn)[b"nodes_file_status"] == b"err"
        assert conn.call("CLUSTER", "SAVECONFIG").startswith(b"-ERR error saving the cluster node config: No space")
        node.advance(0.5)  # retried, logged once
        fs.free()
        node.advance(0.2)
    assert not node.runtime.node.cluster.dirty
    assert open(path, "rb").read() != before
    assert b"nodes_file_status" not in info(conn)
    logged = [formatEvent(e) for e in events]
    assert sum("Could not save the node file" in t for t in logged) == 1
    assert sum("is saved again" in t for t in logged) == 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def render_metrics(node):
    from disque.http.metrics import render

    return render(node.runtime)


def test_a_metric_shows_the_error_state(make):
    node = make(appendonly="yes")
    fs = faulty(node)
    conn = node.connect()
    assert b"disque_aof_write_error 0" in render_metrics(node)
    fs.full()
    conn.proto.dataReceived(cmd("ADDJOB", "q", "x", "0"))
    assert b"disque_aof_write_error 1" in render_metrics(node)
    fs.free()
    node.advance(0.2)
    assert b"disque_aof_write_error 0" in render_metrics(node)


def test_temp_files_a_crash_left_are_removed_at_start(make, tmp_path):
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # a process that has exited
    directory = tmp_path / "n0"
    directory.mkdir()
    stale = ["nodes.conf.tmp-%d" % dead]
    alive = ["nodes.conf.tmp-1"]  # (pid 1 runs: another node's save in progress stays)
    others = ["nodes.conf.bak", "unrelated.tmp-%d" % dead]
    for name in stale + alive + others:
        (directory / name).write_bytes(b"x")
    make(dir=str(directory))
    left = sorted(os.listdir(directory))
    assert not set(stale) & set(left)
    assert set(alive + others) <= set(left)
