"""Stopping and starting real nodes (docs/config.md, "Starting and stopping").

SIGTERM ends a node whatever its links: the process exits with status 0,
with no traceback in its log, and without the bound of
``disque.node.service.STOP_TIMEOUT`` having to end what would not stop
(the node logs "Stopped waiting ..." when it does: that line fails these
tests).  Links of every kind: a plain bus pair, a TLS bus pair (whose
links held the node for ever: a TLS transport waits for its producer
before its close_notify), TLS clients connected, a peer that stops
answering (a SIGSTOPped process: its TLS link is aborted after
``CLOSE_GRACE``), strangers that connect and never finish a TLS
handshake, and a second SIGTERM while the node stops (a log line, not a
``ReactorNotRunning`` traceback).

Every start-up failure ends the process with exit status 1 (as a bad
config file does) and exactly one line on stderr, ``disque: ...``, naming
the directive, port or file and the cause; no traceback anywhere."""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from disque.bus.links import CLOSE_GRACE
from disque.node.service import STOP_TIMEOUT
from tests.support.process import (NodeProcess, _die_with_parent, call, free_port, start_cluster, twistd_path,
                                   wait_for, wait_full_mesh)
from tests.support.tls import TLSClient, client_context, make_pki, node_directives

#: How long a test waits for a node to exit after SIGTERM: the bound, and
#: room for a busy machine (whether the node needed the bound is read in
#: its log).
PATIENCE = STOP_TIMEOUT + 15


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_args(directives):
    return [arg for name, value in directives.items() for arg in ("--set", "%s=%s" % (name, value))]


def tls_node(workdir, pki, **more):
    """A NodeProcess with a TLS client port and ``more`` directives; its
    ``tls_port``."""
    tls_port = free_port()
    node = NodeProcess(workdir, args=tls_args(node_directives(pki, **{"tls-port": tls_port, **more})))
    node.tls_port = tls_port
    return node


def tls_pair(tmp_path, pki):
    """Two started nodes whose bus is mutual TLS, met and meshed."""
    nodes = [tls_node(tmp_path / ("n%d" % i), pki, **{"tls-cluster": "yes"}) for i in range(2)]
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        assert call(nodes[0], "CLUSTER", "MEET", "127.0.0.1", str(nodes[1].tls_port)) == b"OK"
        wait_full_mesh(nodes, timeout=20)
    except BaseException:
        for node in nodes:
            node.kill()
        raise
    return nodes


ABORTED = "not closed after %g s (the peer does not answer): aborted" % CLOSE_GRACE


def stopped_cleanly(node, since, aborted=False):
    """Wait for ``node`` (sent SIGTERM at ``since``) to exit; check how:
    status 0, no traceback, nothing left for the stop's bound, and a link
    aborted after CLOSE_GRACE only if ``aborted`` (a peer not answering).
    Returns its log."""
    try:
        status = node.proc.wait(PATIENCE)
    except subprocess.TimeoutExpired:
        raise AssertionError("still running %g s after SIGTERM:\n%s" % (time.time() - since, node.log_tail()))
    elapsed = time.time() - since
    output = node.proc.stdout.read().decode(errors="replace")
    log = node.log()
    assert status == 0, "exit status %s:\n%s\n%s" % (status, output, node.log_tail())
    assert "Traceback" not in log and "Traceback" not in output, log + output
    assert "Received SIGTERM, shutting down" in log, log
    assert "Stopped waiting" not in log, log  # the node stopped by itself, not by the bound
    assert (ABORTED in log) == aborted, log
    assert elapsed < PATIENCE
    return log


def sigterm(*nodes):
    since = time.time()
    for node in nodes:
        node.proc.send_signal(signal.SIGTERM)
    return since


def bus_pair(tmp_path, pki, tls):
    return tls_pair(tmp_path, pki) if tls else start_cluster(tmp_path, 2)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_sigterm_stops_a_bus_pair(tmp_path, pki, tls):
    """The report, under TLS: both nodes logged SIGTERM, closed their
    ports and ran on (8 s later, every time)."""
    nodes = bus_pair(tmp_path, pki, tls)
    try:
        since = sigterm(*nodes)
        for node in nodes:
            stopped_cleanly(node, since)
    finally:
        for node in nodes:
            node.kill()


def test_sigterm_stops_a_node_with_tls_clients_connected(tmp_path, pki):
    node = tls_node(tmp_path / "n", pki).start()
    clients = []
    try:
        context = client_context(pki.ca, pki.client, pki.client_key)
        for _ in range(2):
            clients.append(TLSClient(node.tls_port, context))
            assert clients[-1].call("PING") == b"PONG"
        assert clients[0].call("ADDJOB", "q", "body", "0").startswith(b"D-")  # one that sent a write
        stopped_cleanly(node, sigterm(node))
    finally:
        for c in clients:
            c.close()
        node.kill()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_sigterm_stops_a_node_whose_peer_stopped_answering(tmp_path, pki, tls):
    """The peer process is SIGSTOPped: its kernel takes our bytes, nothing
    answers.  A plain link closes at once; a TLS link waits for the peer's
    close_notify, then is aborted after CLOSE_GRACE seconds."""
    nodes = bus_pair(tmp_path, pki, tls)
    try:
        nodes[1].proc.send_signal(signal.SIGSTOP)
        stopped_cleanly(nodes[0], sigterm(nodes[0]), aborted=tls)
    finally:
        nodes[1].proc.send_signal(signal.SIGCONT)
        for node in nodes:
            node.kill()


def test_sigterm_stops_a_node_with_strangers_that_never_finish_a_tls_handshake(tmp_path, pki):
    """Raw TCP connections to the TLS client port and to the TLS bus that
    send nothing, and a link of ours to a "peer" (a raw listener, met by
    CLUSTER MEET) whose TLS handshake never gets an answer."""
    node = tls_node(tmp_path / "n", pki, **{"tls-cluster": "yes"})
    node.start()
    fake_port = free_port()
    fake_bus = socket.socket()
    strangers = []
    try:
        fake_bus.bind(("127.0.0.1", fake_port + 10000))
        fake_bus.listen(8)
        for port in (node.tls_port, node.tls_port + 10000):
            strangers.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        assert call(node, "CLUSTER", "MEET", "127.0.0.1", str(fake_port)) == b"OK"
        fake_bus.settimeout(10)
        link, _ = fake_bus.accept()  # our link to it is connected: its handshake waits for an answer
        strangers.append(link)
        link.settimeout(10)
        assert link.recv(1, socket.MSG_PEEK) == b"\x16"  # the link's ClientHello (a TLS handshake record)
        stopped_cleanly(node, sigterm(node))  # a handshake not done is abandoned at once, not after CLOSE_GRACE
    finally:
        for s in strangers + [fake_bus]:
            s.close()
        node.kill()


def test_a_second_sigterm_while_the_node_stops_is_a_line_not_a_traceback(tmp_path, pki):
    """The node's stop lasts CLOSE_GRACE seconds here (its TLS link to a
    stopped peer): the second SIGTERM comes meanwhile."""
    nodes = tls_pair(tmp_path, pki)
    try:
        nodes[1].proc.send_signal(signal.SIGSTOP)
        since = sigterm(nodes[0])
        wait_for(lambda: "Received SIGTERM, shutting down" in nodes[0].log(), timeout=CLOSE_GRACE,
                 what="the first SIGTERM's line")
        nodes[0].proc.send_signal(signal.SIGTERM)
        log = stopped_cleanly(nodes[0], since, aborted=True)
        assert "Received SIGTERM while shutting down: the node stops within %g s" % STOP_TIMEOUT in log, log
        assert "ReactorNotRunning" not in log
    finally:
        nodes[1].proc.send_signal(signal.SIGCONT)
        for node in nodes:
            node.kill()


# -- start-up failures: one line ------------------------------------------------------------


def _occupied(sockets, port):
    """Take ``port`` on 127.0.0.1 (a listening socket, kept in ``sockets``)."""
    s = socket.socket()
    sockets.append(s)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return port


def _port_in_use(tmp_path, pki, sockets):
    port = _occupied(sockets, free_port())
    return ["--port", str(port)], "port: can't listen on 127.0.0.1:%d: Address already in use" % port


def _bus_port_in_use(tmp_path, pki, sockets):
    port = free_port()
    _occupied(sockets, port + 10000)
    return ["--port", str(port)], ("port (the cluster bus, at port + 10000): can't listen on 127.0.0.1:%d: "
                                   "Address already in use" % (port + 10000))


def _tls_port_in_use(tmp_path, pki, sockets):
    tls_port = _occupied(sockets, free_port())
    return (["--port", str(free_port())] + tls_args(node_directives(pki, **{"tls-port": tls_port})),
            "tls-port: can't listen on 127.0.0.1:%d: Address already in use" % tls_port)


def _http_port_in_use(tmp_path, pki, sockets):
    http_port = _occupied(sockets, free_port())
    return (["--port", str(free_port()), "--set", "http-port=%d" % http_port],
            "http-port: can't listen on 127.0.0.1:%d: Address already in use" % http_port)


def _unix_socket_in_a_missing_directory(tmp_path, pki, sockets):
    path = str(tmp_path / "nowhere" / "disque.sock")
    return (["--port", str(free_port()), "--listen", "unix:%s" % path],
            "listen: can't listen on unix:%s: No such file or directory" % path)


def _dir_that_cannot_be_written(tmp_path, pki, sockets):
    # sysfs takes no new file, not even from root
    return (["--port", str(free_port()), "--dir", "/sys"],
            "can't write the node file /sys/nodes.conf (dir, cluster-config-file): Permission denied")


def _dir_that_does_not_exist(tmp_path, pki, sockets):
    path = str(tmp_path / "nowhere")
    return ["--port", str(free_port()), "--dir", path], "'dir'", path, "No such file or directory"


def _aof_that_is_a_directory(tmp_path, pki, sockets):
    os.makedirs(str(tmp_path / "d" / "disque.aof"))
    path = os.path.join(str(tmp_path / "d"), "disque.aof")
    return (["--port", str(free_port()), "--dir", str(tmp_path / "d"), "--appendonly", "yes"],
            "cannot open the append only file %s: Is a directory" % path)


def _node_file_that_is_a_directory(tmp_path, pki, sockets):
    os.makedirs(str(tmp_path / "d" / "nodes.conf"))
    path = os.path.join(str(tmp_path / "d"), "nodes.conf")
    return (["--port", str(free_port()), "--dir", str(tmp_path / "d")],
            "cannot read the node file %s: Is a directory" % path)


def _tls(tmp_path, pki, **files):
    return ["--port", str(free_port())] + tls_args(node_directives(pki, **{"tls-port": free_port(), **files}))


def _certificate_missing(tmp_path, pki, sockets):
    path = str(tmp_path / "missing.crt")
    return _tls(tmp_path, pki, **{"tls-cert-file": path}), \
        "tls-cert-file: can't read %s: No such file or directory" % path


def _certificate_unreadable(tmp_path, pki, sockets):
    os.makedirs(str(tmp_path / "a-directory.crt"))  # (root reads any file: a directory it cannot)
    path = str(tmp_path / "a-directory.crt")
    return _tls(tmp_path, pki, **{"tls-cert-file": path}), "tls-cert-file: can't read %s: Is a directory" % path


def _certificate_not_pem(tmp_path, pki, sockets):
    path = str(tmp_path / "garbage.crt")
    with open(path, "w") as f:
        f.write("not a certificate\n")
    return _tls(tmp_path, pki, **{"tls-cert-file": path}), "tls-cert-file: %s is not a PEM certificate" % path


def _key_not_pem(tmp_path, pki, sockets):
    path = str(tmp_path / "garbage.key")
    with open(path, "w") as f:
        f.write("not a key\n")
    return _tls(tmp_path, pki, **{"tls-key-file": path}), "tls-key-file: %s is not a PEM private key" % path


def _key_of_another_certificate(tmp_path, pki, sockets):
    return (_tls(tmp_path, pki, **{"tls-key-file": pki.node2_key}),
            "tls-key-file: %s is not the key of the certificate in %s (tls-cert-file)" % (pki.node2_key, pki.node))


START_FAILURES = [_port_in_use, _bus_port_in_use, _tls_port_in_use, _http_port_in_use,
                  _unix_socket_in_a_missing_directory, _dir_that_cannot_be_written, _dir_that_does_not_exist,
                  _aof_that_is_a_directory, _node_file_that_is_a_directory, _certificate_missing,
                  _certificate_unreadable, _certificate_not_pem, _key_not_pem, _key_of_another_certificate]


def run_node(args, cwd, prefix=()):
    """``twistd -n --pidfile= disque ARGS`` to its end: (status, stdout,
    stderr).  With ``-n`` twistd logs to stdout: stderr is the node's own."""
    p = subprocess.run(list(prefix) + [twistd_path(), "-n", "--pidfile=", "disque", *args], cwd=str(cwd),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, preexec_fn=_die_with_parent)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def assert_one_line(status, out, err, *expected):
    assert status == 1, "exit status %s\n%s\n%s" % (status, out, err)
    assert "Traceback" not in out + err, out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("disque: "), "stderr:\n" + err
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("case", START_FAILURES, ids=lambda case: case.__name__.strip("_"))
def test_a_start_up_failure_is_one_line_and_exit_status_1(tmp_path, pki, case):
    sockets = []
    try:
        args, *expected = case(tmp_path, pki, sockets)
        assert_one_line(*run_node(args, tmp_path), *expected)
    finally:
        for s in sockets:
            s.close()


def _privileged_port_problem():
    """Why a port this test may not bind cannot be had here, or None."""
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
            start = int(f.read())
    except (OSError, ValueError):
        start = 1024
    if start <= 1:
        return "every port may be bound here (net.ipv4.ip_unprivileged_port_start = %d)" % start
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "as root, the node runs without CAP_NET_BIND_SERVICE through setpriv (util-linux): not installed"
    return None


def test_a_port_the_node_may_not_bind_is_one_line(tmp_path):
    """Port 1 without CAP_NET_BIND_SERVICE: permission denied (as root, the
    node runs with the capability dropped from its bounding set)."""
    problem = _privileged_port_problem()
    if problem:
        pytest.skip(problem)
    prefix = ["setpriv", "--bounding-set", "-net_bind_service"] if os.geteuid() == 0 else []
    assert_one_line(*run_node(["--port", "1", "--dir", str(tmp_path)], tmp_path, prefix),
                    "port: can't listen on 127.0.0.1:1: Permission denied")


def test_a_start_up_failure_is_in_the_log_too(tmp_path):
    """With twistd's -l (as under a service manager), the line is in the
    log file too; stderr has it alone."""
    port = free_port()
    sockets = []
    try:
        _occupied(sockets, port)
        node = NodeProcess(tmp_path / "n", port=port).start(wait=False)
        status = node.proc.wait(30)
        out = node.proc.stdout.read().decode(errors="replace")
    finally:
        for s in sockets:
            s.close()
    line = "port: can't listen on 127.0.0.1:%d: Address already in use" % port
    assert status == 1 and out.splitlines() == ["disque: " + line], out
    assert "Start-up failed: " + line in node.log() and "Traceback" not in node.log(), node.log()
