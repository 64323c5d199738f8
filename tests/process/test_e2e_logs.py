"""loglevel and logfile in a real ``twistd -n -l twistd.log disque`` process:
the node's lines go to its logfile, filtered by its level; twistd's own
lines stay in twistd's log."""

import time

from tests.support.process import NodeProcess
from disque.node.timers import BANNER

READY = "ready to accept connections"


def wait_for(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_loglevel_warning_and_logfile(tmp_path):
    logfile = tmp_path / "disque-node.log"
    conf = tmp_path / "disque.conf"
    conf.write_text("loglevel warning\nlogfile %s\n" % logfile)
    node = NodeProcess(tmp_path / "node", config=str(conf)).start()
    try:
        c = node.client()
        # A warning line: the watchdog catching a stalled event loop.
        assert c.call("CONFIG", "SET", "watchdog-period", "200") == b"OK"
        assert c.call("DEBUG", "SLEEP", "0.6") == b"OK"
        assert wait_for(lambda: BANNER in read(logfile)), read(logfile) + node.log()
        text = read(logfile)
        assert "in debug" in text and "[disque.watchdog#warn]" in text   # the stack of DEBUG SLEEP
        assert READY not in text                                         # an info line: below warning
        twistd = node.log()
        assert "reactor class" in twistd                                 # twistd's own lines: its -l file
        assert READY not in twistd and BANNER not in twistd              # the node's: its logfile only
        # CONFIG SET loglevel takes effect at once: the shutdown line is info.
        assert c.call("CONFIG", "SET", "loglevel", "notice") == b"OK"
        c.send(c.encode("SHUTDOWN"))
        node.proc.wait(10)
        assert "User requested shutdown" in read(logfile)
        assert "User requested shutdown" not in node.log()
    finally:
        node.stop()


def test_default_logfile_is_twistds_log(tmp_path):
    node = NodeProcess(tmp_path / "node").start()
    try:
        assert wait_for(lambda: READY in node.log()), node.log()
    finally:
        node.stop()
