"""loglevel and logfile in a real ``twistd -n -l twistd.log disque`` process:
the node's lines go to its logfile, filtered by its level; twistd's own
lines stay in twistd's log.  A node with every side on (TLS, HTTPS, a
peer) writes no object repr, tags its lines with log-tag, gives the
dashboard's URL when ready and logs HTTP requests at verbose only."""

import re
import time
import urllib.request

from tests.support.process import NodeProcess, call, free_port, wait_full_mesh
from tests.support.process import wait_for as wait_until
from tests.support.tls import TLSClient, client_context, make_pki, node_directives
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


#: What a Python object's default repr looks like in a line.
OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x")
#: A line of the node's own (a disque.* namespace): (namespace, the text).
NODE_LINE = re.compile(r"^\S+ \[(disque[\w.]*)#\w+\] (.*)$")


def node_lines(text):
    return [m.groups() for m in map(NODE_LINE.match, text.splitlines()) if m]


def test_every_side_on_no_repr_a_tag_on_every_line_and_the_dashboards_url(tmp_path):
    pki = make_pki(tmp_path / "pki")
    tls_port, http_port = free_port(), free_port()
    tls = ["--set=%s=%s" % item for item in node_directives(pki, **{"tls-port": tls_port}).items()]
    a = NodeProcess(tmp_path / "a", args=tls + ["--http-port", str(http_port), "--set", "http-tls=yes",
                                                "--set", "log-tag={port}"])
    b = NodeProcess(tmp_path / "b", args=["--set", "log-tag=b/{id}"])
    try:
        a.start()
        b.start()
        assert call(a, "CLUSTER", "MEET", "127.0.0.1", str(b.port)) == b"OK"
        wait_full_mesh([a, b])
        context = client_context(pki.ca, pki.client, pki.client_key)
        tls_client = TLSClient(tls_port, context)
        assert tls_client.call("PING") == b"PONG"
        tls_client.close()
        https = client_context(pki.ca)
        for path in ("/", "/static/app.js", "/api/node", "/metrics"):
            with urllib.request.urlopen("https://127.0.0.1:%d%s" % (http_port, path), context=https) as r:
                assert r.status == 200
        # Requests are verbose lines: none so far; one once the level says so.
        assert call(a, "CONFIG", "SET", "loglevel", "verbose") == b"OK"
        with urllib.request.urlopen("https://127.0.0.1:%d/api/queues" % http_port, context=https) as r:
            assert r.status == 200
        wait_until(lambda: "/api/queues" in a.log(), what="the access line")
        b_id = call(b, "HELLO")[1].decode()
    finally:
        a.stop()
        b.stop()
    for node, tag in ((a, "[%d] " % a.port), (b, "[b/%s] " % b_id[:8])):
        text = node.log()
        assert not OBJECT_REPR.search(text), text
        assert "Starting factory" not in text and "Stopping factory" not in text, text
        lines = node_lines(text)
        assert lines and all(line.startswith(tag) for _, line in lines), text     # every line of the node
        assert any("joined the cluster" in line for _, line in lines), text
    ready = [line for _, line in node_lines(a.log()) if "ready to accept connections" in line]
    assert len(ready) == 1 and ready[0].startswith("[%d] Disque " % a.port) and ready[0].endswith(
        "ready to accept connections on port %d, TLS port %d; dashboard at https://127.0.0.1:%d/"
        % (a.port, tls_port, http_port)), ready
    access = [line for namespace, line in node_lines(a.log()) if namespace == "disque.http"]
    assert len(access) == 1 and access[0].startswith(
        '[%d] HTTP 127.0.0.1 default "GET /api/queues HTTP/1.1" 200 ' % a.port), access
