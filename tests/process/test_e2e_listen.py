"""Listeners from endpoint strings in real processes: a node started with
``--listen`` serves TCP and a Unix socket, joins a cluster through its
derived bus and a ``cluster-connect`` string; bad strings and
``--help-strategies`` from the real ``twistd``."""

import os
import shutil
import socket
import tempfile

from tests.support.process import NodeProcess, call, free_port, run_twistd, show, wait_for, wait_full_mesh


def test_a_node_listens_where_listen_says_and_joins_a_cluster(tmp_path):
    sockdir = tempfile.mkdtemp(prefix="dq")  # Unix socket paths are short
    sock = os.path.join(sockdir, "d.sock")
    port = free_port()
    listen = "tcp:%d:interface=127.0.0.1 unix:%s" % (port, sock)
    a = NodeProcess(tmp_path / "a").start()
    b = NodeProcess(tmp_path / "b", port=port, args=("--listen", listen, "--set", "cluster-connect=tcp:timeout=3"))
    try:
        b.start()
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(sock)
            s.sendall(b"PING\r\n")
            assert s.recv(64) == b"+PONG\r\n"
        assert call(b, "CONFIG", "GET", "listen") == [b"listen", listen.encode()]
        assert call(b, "CONFIG", "GET", "port") == [b"port", str(port).encode()]
        # B's bus is beside its first listener; B's links leave through cluster-connect
        assert call(b, "CLUSTER", "MEET", "127.0.0.1", str(a.port)) == b"OK"
        wait_full_mesh([a, b])
        job_id = call(a, "ADDJOB", "q", "x", "0", "REPLICATE", "2")
        wait_for(lambda: show(b, job_id), what="the copy on B")
        assert "Disque" in b.log() and "ready to accept connections on port %d" % port in b.log()
    finally:
        a.stop()
        b.stop()
        shutil.rmtree(sockdir, ignore_errors=True)


def test_a_bad_listen_string_stops_start_up_with_one_line(tmp_path):
    rc, out = run_twistd(["--port", str(free_port()), "--listen", "tcp:7711 tcp:seven"], tmp_path)
    assert rc != 0 and "Traceback" not in out
    assert "disque: listen: bad endpoint 'tcp:seven': 'seven' is not a number" in out


def test_help_strategies_from_twistd(tmp_path):
    rc, out = run_twistd(["--help-strategies"], tmp_path)
    assert rc == 0 and "Traceback" not in out
    for word in ("aof", "none", "default", "rewrite-step=<jobs>", "max-request=<jobs>", "cluster-connect"):
        assert word in out
