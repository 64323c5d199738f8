"""A real node on a real full disk: its ``dir`` on a 1 MB tmpfs, filled by
ADDJOBs, then freed (process tier).

What must hold, under ``appendfsync everysec`` and ``always``: while the
disk is full, writes (and PING) are refused with ``-MISCONF``; the ADDJOB
whose record could not be written gets no ID until it is on disk; once
space is back, writes are accepted again; and after kill -9 and a restart
every ADDJOB that got an ID is there.

Mounting needs root (CAP_SYS_ADMIN): without it the tests are skipped with
the reason.  The node's log stays outside the small disk."""

import os
import subprocess
from contextlib import contextmanager

import pytest

from tests.support.process import Client, NodeProcess, info, wait_for

BODY = b"j" * 1024


def _mount_problem():
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (CAP_SYS_ADMIN); .ci/run runs the suite as root"
    return None


pytestmark = pytest.mark.skipif(_mount_problem() is not None, reason=_mount_problem() or "")


@contextmanager
def small_disk(path, size="1m"):
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % done.stderr.strip())
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def reply_within(client, seconds):
    """The next reply, or None if none comes within ``seconds``."""
    if client.nothing_within(seconds):
        return None
    return client.read(timeout=10)


@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_a_full_disk_refuses_writes_and_loses_no_acknowledged_job(tmp_path, policy):
    disk = tmp_path / "disk"
    with small_disk(disk):
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (700 * 1024))
        args = ["--dir", str(disk), "--appendonly", "yes", "--set", "appendfsync=%s" % policy]
        node = NodeProcess(tmp_path / "node", args=args).start()
        try:
            producer, other = node.client(), node.client()
            acked = []
            held = None
            for _ in range(2000):  # far more than the disk holds
                producer.send(Client.encode("ADDJOB", "q", BODY, "0"))
                reply = reply_within(producer, 2.0)
                if reply is None:  # its record is not on disk: no ID yet
                    held = producer
                    break
                if isinstance(reply, Exception):
                    assert str(reply).startswith("Errors writing to the AOF file"), reply
                    break
                acked.append(reply)
            assert acked, "the disk was full before the first job"
            assert len(acked) < 2000, "the disk never filled"
            # While the disk is full: writes and PING refused, reads answered.
            refused = other.call("ADDJOB", "q", BODY, "0")
            assert isinstance(refused, Exception)
            assert str(refused) == "MISCONF Errors writing to the AOF file: No space left on device"
            assert str(other.call("PING")).startswith("MISCONF")
            fields = info(other, "persistence")
            assert fields["aof_last_write_status"] == "err"
            assert int(fields["aof_last_write_errno"]) == 28
            assert isinstance(other.call("QLEN", "q"), int)
            filler.unlink()
            if held is not None:  # written at the next tick: the ID comes now
                late = held.read(timeout=10)
                assert isinstance(late, bytes) and late.startswith(b"D-"), late
                acked.append(late)
            wait_for(lambda: info(other, "persistence")["aof_last_write_status"] == "ok", timeout=10,
                     what="the write error solved")
            assert other.call("PING") == b"PONG"
            after = other.call("ADDJOB", "q", BODY, "0")
            assert after.startswith(b"D-")
            acked.append(after)
            assert "AOF write error looks solved" in node.log()
            node.kill()
            node = NodeProcess(tmp_path / "node", port=node.port, args=args).start()
            c = node.client()
            missing = [jid for jid in acked if c.call("SHOW", jid) is None]
            assert missing == [], "%d of %d acknowledged jobs lost" % (len(missing), len(acked))
        finally:
            node.kill()
