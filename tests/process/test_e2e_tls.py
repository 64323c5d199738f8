"""TLS with real node processes: the real redis-cli on the TLS client port,
plain and TLS ports side by side or TLS alone, ``tls-auth-clients``, and a
3-node cluster whose bus is mutual TLS (``tls-cluster yes``): it meets,
replicates and acknowledges jobs, while a bus intruder -- plain TCP, or TLS
without a certificate of the cluster's CA -- gets no byte and is not
learned.  Certificates: tls_support.make_pki, one throwaway CA per module."""

import os
import shutil
import socket
import ssl
import struct
import subprocess
import time

import pytest

from disque.bus import wire
from disque.core import messages
from tests.support.process import ROOT, NodeProcess, call, free_port, redis_cli, show, wait_for, wait_full_mesh
from tests.support.tls import TLSClient, client_context, make_pki, node_directives

FAKE_ID = b"f" * 40


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_args(directives):
    return [arg for name, value in directives.items() for arg in ("--set", "%s=%s" % (name, value))]


def cli(pki, port, *args, cert="client"):
    """redis-cli --tls against ``port``: (returncode, stdout).  ``cert``:
    the client certificate of make_pki presented ("client", "intruder"),
    or None."""
    creds = ["--cert", getattr(pki, cert), "--key", getattr(pki, cert + "_key")] if cert else []
    return redis_cli(port, "--tls", "--cacert", pki.ca, *creds, *args)


def pong_over_tls(pki, port, cert="client"):
    return cli(pki, port, "PING", cert=cert) == (0, b"PONG\n")


def wait_started(node):
    """Wait for a node started with start(wait=False) and no plain port
    (NodeProcess.wait_ready PINGs the plain one): its start-up line."""
    wait_for(lambda: node.proc.poll() is not None or "ready to accept connections" in node.log(), timeout=15,
             what="the node's start")
    assert node.proc.poll() is None, node.log()


def plain_gets_nothing(port):
    """A plain RESP PING to a TLS port gets no reply: the bytes are not a
    TLS handshake, and the connection closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        data = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    return b"PONG" not in data and not data.startswith(b"+")


def test_plain_and_tls_ports_side_by_side_and_tls_auth_clients(tmp_path, pki):
    tls_port = free_port()
    # tcp-keepalive: the TCP options reach the socket under the TLS
    node = NodeProcess(tmp_path / "n", args=tls_args(node_directives(pki, **{"tls-port": tls_port,
                                                                             "tcp-keepalive": 60}))).start()
    try:
        assert redis_cli(node.port, "PING") == (0, b"PONG\n")  # the plain port, as before
        assert "ready to accept connections on port %d, TLS port %d" % (node.port, tls_port) in node.log()
        assert pong_over_tls(pki, tls_port)
        # tls-auth-clients yes (the default): no certificate, or one of another CA, gets nothing
        assert not pong_over_tls(pki, tls_port, cert=None)
        assert not pong_over_tls(pki, tls_port, cert="intruder")
        assert plain_gets_nothing(tls_port)
        # the same through Python's ssl module, on one connection: commands work over TLS
        c = TLSClient(tls_port, client_context(pki.ca, pki.client, pki.client_key))
        job_id = c.call("ADDJOB", "q", "over tls", "0")
        assert c.call("GETJOB", "NOHANG", "FROM", "q") == [[b"q", job_id, b"over tls"]]
        big = bytes(range(256)) * 8192  # 2 MB: replies larger than a TLS record and a socket buffer
        job_id = c.call("ADDJOB", "q", big, "0")
        assert c.call("GETJOB", "NOHANG", "FROM", "q") == [[b"q", job_id, big]]
        c.close()
        # CONFIG SET tls-auth-clients: new connections follow (reloaded, no restart)
        assert call(node, "CONFIG", "SET", "tls-auth-clients", "no") == b"OK"
        assert pong_over_tls(pki, tls_port, cert=None)
        assert call(node, "CONFIG", "SET", "tls-auth-clients", "optional") == b"OK"
        assert pong_over_tls(pki, tls_port, cert=None)
        assert pong_over_tls(pki, tls_port)
        assert not pong_over_tls(pki, tls_port, cert="intruder")  # if given, it must be valid
    finally:
        node.stop()


def test_renewed_certificates_serve_new_connections_without_a_restart(tmp_path, pki):
    cert, key = str(tmp_path / "live.crt"), str(tmp_path / "live.key")
    shutil.copy(pki.node, cert)
    shutil.copy(pki.node_key, key)
    tls_port = free_port()
    node = NodeProcess(tmp_path / "n", args=tls_args(node_directives(
        pki, **{"tls-port": tls_port, "tls-cert-file": cert, "tls-key-file": key}))).start()
    context = client_context(pki.ca, pki.client, pki.client_key)

    def served_by():
        c = TLSClient(tls_port, context)
        try:
            return dict(field[0] for field in c.sock.getpeercert()["subject"])["commonName"], c
        except BaseException:
            c.close()
            raise

    try:
        name, before = served_by()
        assert name == "disque node"
        shutil.copy(pki.node2, cert)  # renewed in place, certificate and key together
        shutil.copy(pki.node2_key, key)
        assert call(node, "CONFIG", "SET", "tls-cert-file", cert) == b"OK"
        name, after = served_by()
        assert name == "disque node2"
        assert before.call("PING") == b"PONG" and after.call("PING") == b"PONG"  # the open one goes on
        before.close()
        after.close()
    finally:
        node.stop()


def test_port_0_serves_tls_only(tmp_path, pki):
    tls_port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--port", "0"] + tls_args(node_directives(pki, **{"tls-port": tls_port})))
    node.start(wait=False)
    try:
        wait_started(node)
        assert "ready to accept connections on port %d (TLS)" % tls_port in node.log()
        assert pong_over_tls(pki, tls_port)
        assert plain_gets_nothing(tls_port)
        c = TLSClient(tls_port, client_context(pki.ca, pki.client, pki.client_key))
        assert c.call("CONFIG", "GET", "port") == [b"port", b"0"]
        c.close()
    finally:
        node.stop()


def _closed_by_the_node(c, seconds):
    """True if the node ends the TLS connection of ``c`` within ``seconds``
    (whatever it still sends is read and dropped)."""
    c.sock.settimeout(seconds)
    try:
        while c.sock.recv(4096):
            pass
    except socket.timeout:
        return False
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    return True


def test_the_node_closes_the_tls_clients_it_drops(tmp_path, pki):
    """Closing a TLS connection is the TLS layer's close_notify, which
    waits for the connection's producer to go, and the client protocol
    was registered as one for its whole life: a TLS client the node
    dropped (a protocol error, CLIENT KILL, the idle timeout) stayed
    connected.  The error reply still comes before the close."""
    tls_port = free_port()
    node = NodeProcess(tmp_path / "n", args=tls_args(node_directives(pki, **{"tls-port": tls_port}))).start()
    context = client_context(pki.ca, pki.client, pki.client_key)
    clients = [TLSClient(tls_port, context) for _ in range(3)]
    try:
        bad, killed, idle = clients
        bad.send(b"*1\r\n$abc\r\n")
        assert str(bad.read()) == "ERR Protocol error: invalid bulk length"
        assert _closed_by_the_node(bad, 5)
        assert killed.call("PING") == b"PONG"
        address = "127.0.0.1:%d" % killed.sock.getsockname()[1]
        assert call(node, "CLIENT", "KILL", "ADDR", address) == 1
        assert _closed_by_the_node(killed, 5)
        assert idle.call("PING") == b"PONG"
        assert call(node, "CONFIG", "SET", "timeout", "1") == b"OK"
        assert _closed_by_the_node(idle, 10)  # within a check or two (1 s apart) of its second idle second
    finally:
        for c in clients:
            c.close()
        node.stop()


def test_a_config_without_a_certificate_is_refused_at_start_up(tmp_path, pki):
    from tests.support.process import run_twistd

    rc, out = run_twistd(["--port", str(free_port()), "--set", "tls-port=%d" % free_port(),
                          "--set", "tls-ca-cert-file=" + pki.ca], tmp_path)
    assert rc != 0 and "Traceback" not in out
    assert "disque: tls-cert-file: TLS needs a certificate and its private key" in out


def _bus_frame(header_port=1):
    """A well-formed MEET from a node nobody knows (FAKE_ID), with its
    length prefix."""
    frame = wire.encode(messages.Header(FAKE_ID, b"127.0.0.1", header_port, 0), messages.Meet(()))
    return struct.pack("!I", len(frame)) + frame


def _what_the_bus_answers(port, wrap=None, seconds=1.5):
    """Send _bus_frame to the bus at ``port`` (over ``wrap``'s TLS if
    given); the bytes received until the bus closes or ``seconds`` of
    silence (b"" for nothing; a TLS refusal is nothing too)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    data = b""
    try:
        if wrap is not None:
            sock = wrap.wrap_socket(sock)  # TLS 1.3: a refused client certificate shows on the first read
        sock.sendall(_bus_frame())
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError, socket.timeout):
        pass
    finally:
        sock.close()
    return data


def _nodes_text(node):
    return call(node, "CLUSTER", "NODES")


def test_a_tls_cluster_replicates_and_a_bus_intruder_gets_nothing(tmp_path, pki):
    tls_ports = [free_port() for _ in range(3)]
    nodes = []
    for i, tls_port in enumerate(tls_ports):
        # node certificates of the same CA (two different ones); the plain port drives the test
        cert = (pki.node, pki.node_key) if i % 2 == 0 else (pki.node2, pki.node2_key)
        directives = node_directives(pki, **{"tls-port": tls_port, "tls-cluster": "yes",
                                             "tls-cert-file": cert[0], "tls-key-file": cert[1]})
        nodes.append(NodeProcess(tmp_path / ("n%d" % i), args=tls_args(directives)))
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        # peers are met at their TLS port: the one they advertise, the bus being at + 10000
        for a, b_port in zip(nodes, tls_ports[1:]):
            assert call(a, "CLUSTER", "MEET", "127.0.0.1", str(b_port)) == b"OK"
        wait_full_mesh(nodes, timeout=20)
        assert b"127.0.0.1:%d" % tls_ports[1] in _nodes_text(nodes[0])

        rc, out = cli(pki, tls_ports[0], "ADDJOB", "tq", "secret body", "0", "REPLICATE", "3")
        job_id = out.strip()
        assert rc == 0 and job_id.startswith(b"D-"), out
        for node in nodes:
            wait_for(lambda node=node: show(node, job_id), what="the copy on every node")
        # queued on node 0 only: node 1's GETJOB has it brought over the bus (NEEDJOBS, YOURJOBS)
        c = TLSClient(tls_ports[1], client_context(pki.ca, pki.client, pki.client_key))
        assert c.call("GETJOB", "TIMEOUT", "10000", "FROM", "tq") == [[b"tq", job_id, b"secret body"]]
        c.close()
        assert cli(pki, tls_ports[2], "ACKJOB", job_id) == (0, b"1\n")
        for node in nodes:
            wait_for(lambda node=node: show(node, job_id) is None, what="the job acknowledged everywhere")

        # Intruders on node 0's bus: plain TCP, TLS without a certificate,
        # TLS with a certificate of another CA.  None gets a byte back.
        bus = tls_ports[0] + 10000
        trust_nothing = client_context()  # intruders do not check the node either
        assert _what_the_bus_answers(bus) == b""
        assert _what_the_bus_answers(bus, trust_nothing) == b""
        assert _what_the_bus_answers(bus, client_context(None, pki.intruder, pki.intruder_key)) == b""
        assert FAKE_ID not in _nodes_text(nodes[0])
        assert all(node.proc.poll() is None for node in nodes)
        # The control: the same frame from a holder of the CA's certificate
        # is a MEET the node answers (a PONG) and learns from.
        answer = _what_the_bus_answers(bus, client_context(None, pki.node2, pki.node2_key))
        header, msg = wire.decode(answer[4:4 + struct.unpack("!I", answer[:4])[0]])
        assert isinstance(msg, messages.Pong)
        assert FAKE_ID in _nodes_text(nodes[0])
    finally:
        for node in nodes:
            node.stop()


def test_a_node_of_another_ca_never_joins_and_its_link_is_not_up(tmp_path, pki):
    """A node with tls-cluster yes but a certificate of another CA: a MEET
    to it leaves it in handshake; the link never counts as up (no "is
    back" / "lost" line per retry, one warning), and it learns nothing
    either (the MEET it would answer needs the handshake)."""
    ports = [free_port(), free_port()]
    member = NodeProcess(tmp_path / "member", args=tls_args(node_directives(
        pki, **{"tls-port": ports[0], "tls-cluster": "yes"})))
    stranger = NodeProcess(tmp_path / "stranger", args=tls_args({
        "tls-port": ports[1], "tls-cluster": "yes", "tls-cert-file": pki.intruder, "tls-key-file": pki.intruder_key,
        "tls-ca-cert-file": pki.other_ca}))
    try:
        member.start(wait=False)
        stranger.start()
        member.wait_ready()
        assert call(member, "CLUSTER", "MEET", "127.0.0.1", str(ports[1])) == b"OK"
        assert call(stranger, "CLUSTER", "MEET", "127.0.0.1", str(ports[0])) == b"OK"
        for node in (member, stranger):
            wait_for(lambda node=node: "no TLS handshake" in node.log(), timeout=10, what="the warning")
        time.sleep(2.5)  # a few more reconnection attempts (backoff up to 1 s): still one line
        for node in (member, stranger):
            peers = [line for line in _nodes_text(node).splitlines() if b"myself" not in line]
            assert len(peers) == 1 and b" handshake " in peers[0] and peers[0].endswith(b" disconnected"), peers
            assert node.log().count("no TLS handshake") == 1, node.log()
            assert "is back after" not in node.log() and "lost, reconnecting" not in node.log()
    finally:
        member.stop()
        stranger.stop()


def _doc_block(heading):
    """The first ```sh block after ``heading`` in docs/security.md."""
    import re

    with open(os.path.join(ROOT, "docs", "security.md")) as f:
        text = f.read()
    return re.search(r"```sh\n(.*?)```", text[text.index(heading):], re.S).group(1)


def test_the_tls_cluster_of_the_docs_runs(tmp_path):
    """docs/security.md's openssl commands, run as written in a copy of
    examples/tls/, make certificates the example configs' nodes (TLS only,
    tls-cluster yes; on free ports here) start with, meet with, and
    replicate a job with."""
    assert shutil.which("openssl"), "openssl not installed (apt-get install openssl; .ci/run does it)"
    here = tmp_path / "tls"
    shutil.copytree(os.path.join(ROOT, "examples", "tls"), str(here))
    made = subprocess.run(["sh", "-e", "-c", _doc_block("## Making a CA and certificates")], cwd=str(here),
                          capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert made.stdout.count(b": OK") == 4  # openssl verify of the 3 node certificates and the client's
    certs = _doc_certs(str(here / "certs"))
    ports = [free_port() for _ in range(3)]
    nodes = [NodeProcess(here, port=port, config="node%d.conf" % (i + 1), args=["--port", "0", "--set",
                                                                                "tls-port=%d" % port])
             for i, port in enumerate(ports)]
    context = client_context(certs.ca, certs.client, certs.client_key)

    def tls_call(port, *args):
        c = TLSClient(port, context)
        try:
            return c.call(*args)
        finally:
            c.close()

    def reachable(port):
        return "cluster_reachable_nodes:2" in tls_call(port, "CLUSTER", "INFO").decode()

    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            wait_started(node)
        for port in ports[1:]:
            assert tls_call(ports[0], "CLUSTER", "MEET", "127.0.0.1", str(port)) == b"OK"
        for port in ports:
            wait_for(lambda port=port: reachable(port), timeout=20, what="a full mesh over the TLS bus")
        rc, out = redis_cli(ports[0], "--tls", "--cacert", certs.ca, "--cert", certs.client, "--key",
                            certs.client_key, "ADDJOB", "q", "hello", "0", "REPLICATE", "3")
        assert rc == 0 and out.startswith(b"D-"), out
        assert tls_call(ports[1], "GETJOB", "TIMEOUT", "10000", "FROM", "q") == [[b"q", out.strip(), b"hello"]]
    finally:
        for node in nodes:
            node.stop()


def _doc_certs(directory):
    """The files of the docs' recipe, named as tls_support.PKI names them."""
    from types import SimpleNamespace

    join = lambda name: os.path.join(directory, name)  # noqa: E731
    return SimpleNamespace(ca=join("ca.crt"), client=join("client.crt"), client_key=join("client.key"))


def test_tls_and_a_cluster_password_together(tmp_path, pki):
    """Both handshakes on every bus connection: the link is up once the TLS
    one and the cluster-password one are done, and the nodes replicate."""
    tls_ports = [free_port() for _ in range(2)]
    nodes = [NodeProcess(tmp_path / ("n%d" % i), args=tls_args(node_directives(pki, **{
        "tls-port": port, "tls-cluster": "yes", "cluster-password": "both"})))
        for i, port in enumerate(tls_ports)]
    try:
        for node in nodes:
            node.start()
        assert call(nodes[0], "CLUSTER", "MEET", "127.0.0.1", str(tls_ports[1])) == b"OK"
        wait_full_mesh(nodes, timeout=20)
        job_id = call(nodes[0], "ADDJOB", "q", "body", "5000", "REPLICATE", "2")
        assert job_id.startswith(b"D-") and show(nodes[1], job_id) is not None
        assert all(b"bus_auth_failures:0" in call(n, "INFO", "stats") for n in nodes)
    finally:
        for node in nodes:
            node.stop()
