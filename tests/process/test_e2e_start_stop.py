"""Stopping real nodes (docs/config.md, "Starting and stopping").

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
``ReactorNotRunning`` traceback)."""

import signal
import socket
import subprocess
import time

import pytest

from disque.bus.links import CLOSE_GRACE
from disque.node.service import STOP_TIMEOUT
from tests.support.process import NodeProcess, call, free_port, start_cluster, wait_for, wait_full_mesh
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


def test_sigterm_stops_a_plain_bus_pair(tmp_path):
    nodes = start_cluster(tmp_path, 2)
    try:
        since = sigterm(*nodes)
        for node in nodes:
            stopped_cleanly(node, since)
    finally:
        for node in nodes:
            node.kill()


def test_sigterm_stops_a_tls_bus_pair(tmp_path, pki):
    """The report: both nodes logged SIGTERM, closed their ports and ran
    on (8 s later, every time)."""
    nodes = tls_pair(tmp_path, pki)
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
    nodes = tls_pair(tmp_path, pki) if tls else start_cluster(tmp_path, 2)
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
