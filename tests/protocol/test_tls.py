"""TLS directives in memory (disque.node.tls, disque.node.listeners): what a node
built on a MemoryReactorClock listens on and connects with, which configs
are refused at start-up and with which line, and CONFIG SET reloading the
certificates.  Certificates come from tls_support.make_pki (one throwaway
CA per module); the handshakes themselves are in test_e2e_tls."""

import pytest
from OpenSSL import SSL
from twisted.internet.testing import MemoryReactorClock
from twisted.protocols.tls import TLSMemoryBIOFactory

from disque.bus.protocol import BusServerFactory
from disque.config import Config, ConfigError
from disque.resp.protocol import RespFactory
from disque.node.service import DisqueNodeService
from disque.node.tap import Options, makeService
from disque.node.tls import TLSError
from tests.support.memory import command, meet_a_peer, memory_config
from tests.support.tls import make_pki, node_directives


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def build(tmp_path, **overrides):
    config = memory_config({"dir": str(tmp_path), "port": "7711", **overrides})
    reactor = MemoryReactorClock()
    return DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None), reactor


def listeners(reactor):
    """(port, interface, "tls" or "plain", what the connections speak) of
    every TCP listener, in order."""
    out = []
    for port, factory, _, interface in reactor.tcpServers:
        tls = isinstance(factory, TLSMemoryBIOFactory)
        inner = factory.wrappedFactory if tls else factory
        out.append((port, interface, "tls" if tls else "plain",
                    "resp" if isinstance(inner, RespFactory) else "bus" if isinstance(inner, BusServerFactory) else inner))
    return out


def link_factory(reactor):
    """The factory the first link's TCP connection was made with, under
    the endpoint's own wrapper."""
    return reactor.tcpClients[0][2]._wrappedFactory


def subject(service, role):
    """The CN of the certificate the context of ``role`` presents."""
    from cryptography.x509.oid import NameOID

    cert = SSL.Connection(service.tls.current[role], None).get_certificate().to_cryptography()
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_tls_port_listens_beside_the_plain_port_and_the_bus_stays_plain(tmp_path, pki):
    service, reactor = build(tmp_path, **node_directives(pki, **{"tls-port": "7712"}))
    service.startService()
    try:
        assert listeners(reactor) == [(7711, "127.0.0.1", "plain", "resp"), (7712, "127.0.0.1", "tls", "resp"),
                                      (17711, "127.0.0.1", "plain", "bus")]
        assert service.node.cluster.myself.port == 7711  # the plain port is advertised
        assert [l.description for l in service.listeners][1] == "tcp:7712:interface=127.0.0.1:backlog=511 (TLS)"
        assert subject(service, "clients") == "disque node"
        # links to peers: plain TCP, no TLS without tls-cluster
        meet_a_peer(service, reactor)
        assert not isinstance(link_factory(reactor), TLSMemoryBIOFactory)
    finally:
        service.stopService()


def test_port_0_with_a_tls_port_is_tls_only(tmp_path, pki):
    service, reactor = build(tmp_path, port="0", **node_directives(pki, **{"tls-port": "7712"}))
    service.startService()
    try:
        assert listeners(reactor) == [(7712, "127.0.0.1", "tls", "resp"), (17712, "127.0.0.1", "plain", "bus")]
        assert service.node.cluster.myself.port == 7712
    finally:
        service.stopService()


def test_tls_cluster_advertises_the_tls_port_and_puts_the_bus_and_links_under_tls(tmp_path, pki):
    service, reactor = build(tmp_path, bind="127.0.0.1 ::1", **node_directives(
        pki, **{"tls-port": "7712", "tls-cluster": "yes", "tls-auth-clients": "no"}))
    service.startService()
    try:
        assert listeners(reactor) == [(7712, "127.0.0.1", "tls", "resp"), (7712, "::1", "tls", "resp"),
                                      (7711, "127.0.0.1", "plain", "resp"), (7711, "::1", "plain", "resp"),
                                      (17712, "127.0.0.1", "tls", "bus"), (17712, "::1", "tls", "bus")]
        assert service.node.cluster.myself.port == 7712
        # the bus asks for a certificate whatever tls-auth-clients says; the client port does not
        assert service.tls.current["bus-server"].get_verify_mode() == SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        assert service.tls.current["clients"].get_verify_mode() == SSL.VERIFY_NONE
        assert subject(service, "bus-client") == "disque node"  # presented to the peers
        host, port, _, _ = meet_a_peer(service, reactor)
        assert (host, port) == ("127.0.0.1", 17712)
        factory = link_factory(reactor)
        assert isinstance(factory, TLSMemoryBIOFactory)
        # the links' connections use the bus-client context current when each is made
        connection = service.connector.tls.clientConnectionForTLS(None)
        assert connection.get_context() is service.tls.current["bus-client"]
        service.tls.reload()
        assert service.connector.tls.clientConnectionForTLS(None).get_context() is service.tls.current["bus-client"]
        assert connection.get_context() is not service.tls.current["bus-client"]
    finally:
        service.stopService()


@pytest.mark.parametrize("auth, mode", [
    ("yes", SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT),
    ("optional", SSL.VERIFY_PEER),
    ("no", SSL.VERIFY_NONE),
])
def test_tls_auth_clients_sets_what_the_client_port_asks_for(tmp_path, pki, auth, mode):
    service, _ = build(tmp_path, **node_directives(pki, **{"tls-port": "7712", "tls-auth-clients": auth}))
    assert service.tls.current["clients"].get_verify_mode() == mode


@pytest.mark.parametrize("protocols, low, high", [
    ("", SSL.TLS1_2_VERSION, SSL.TLS1_3_VERSION),
    ("TLSv1.3", SSL.TLS1_3_VERSION, SSL.TLS1_3_VERSION),
    ("tlsv1.1 TLSv1.2", SSL.TLS1_1_VERSION, SSL.TLS1_2_VERSION),
])
def test_tls_protocols_bound_the_versions(monkeypatch, tmp_path, pki, protocols, low, high):
    calls = []
    monkeypatch.setattr(SSL.Context, "set_min_proto_version", lambda self, v: calls.append(("min", v)))
    monkeypatch.setattr(SSL.Context, "set_max_proto_version", lambda self, v: calls.append(("max", v)))
    build(tmp_path, **node_directives(pki, **{"tls-port": "7712", "tls-protocols": protocols}))
    assert calls == [("min", low), ("max", high)]


@pytest.mark.parametrize("value, message", [
    ("TLSv1.4", "versions are TLSv1, TLSv1.1, TLSv1.2 and TLSv1.3"),
    ("TLSv1 TLSv1.3", "the versions must be consecutive"),
    ("SSLv3", "versions are"),
])
def test_bad_tls_protocols_are_refused_by_the_config(value, message):
    with pytest.raises(ConfigError) as e:
        Config.defaults().apply_overrides({"tls-protocols": value})
    assert "invalid value '%s' for 'tls-protocols'" % value in str(e.value) and message in str(e.value)


def test_tls_auth_clients_takes_yes_no_optional():
    with pytest.raises(ConfigError) as e:
        Config.defaults().apply_overrides({"tls-auth-clients": "maybe"})
    assert "must be one of yes, no, optional" in str(e.value)


def _refusal(tmp_path, overrides):
    """The TLSError of building a node, and the line twistd prints."""
    with pytest.raises(TLSError) as e:
        build(tmp_path, **overrides)
    options = Options()
    options.parseOptions(["--dir", str(tmp_path)] + ["--set=%s=%s" % kv for kv in overrides.items()])
    reactor = MemoryReactorClock()
    with pytest.raises(SystemExit) as exit_:
        makeService(options, reactor=reactor)
    assert str(exit_.value) == "disque: " + str(e.value) and "\n" not in str(exit_.value)
    assert reactor.tcpServers == []  # nothing listened
    return str(e.value)


def test_start_up_refuses_tls_without_what_it_needs(tmp_path, pki):
    full = node_directives(pki, **{"tls-port": "7712"})
    without = lambda name, **more: {k: v for k, v in dict(full, **more).items() if k != name}  # noqa: E731
    assert _refusal(tmp_path, without("tls-cert-file")).startswith("tls-cert-file: TLS needs a certificate")
    assert _refusal(tmp_path, without("tls-key-file")).startswith("tls-key-file: TLS needs a certificate")
    assert _refusal(tmp_path, without("tls-ca-cert-file")).startswith(
        "tls-ca-cert-file: either tls-ca-cert-file or tls-ca-cert-dir must be set")
    assert _refusal(tmp_path, {**node_directives(pki), "tls-cluster": "yes"}).startswith(
        "tls-cluster: the TLS cluster bus needs tls-port")
    assert _refusal(tmp_path, dict(full, **{"tls-port": "7711"})).startswith("tls-port: 7711 is the plain port too")
    cluster = dict(full, **{"tls-cluster": "yes"})
    assert _refusal(tmp_path, dict(cluster, **{"cluster-connect": "ssl:caCertsDir=/etc/ssl/certs"})).startswith(
        "cluster-connect: with tls-cluster yes it names the transport under TLS")
    assert _refusal(tmp_path, dict(cluster, **{"cluster-listen": "tcp:17712 ssl:17713:privateKey=k"})).startswith(
        "cluster-listen: with tls-cluster yes")
    missing = str(tmp_path / "nope.crt")
    assert _refusal(tmp_path, dict(full, **{"tls-cert-file": missing})) == \
        "tls-cert-file: can't read %s: No such file or directory" % missing
    assert _refusal(tmp_path, dict(full, **{"tls-key-file": pki.node2_key})) == \
        "tls-key-file: %s is not the key of the certificate in %s (tls-cert-file)" % (pki.node2_key, pki.node)
    assert _refusal(tmp_path, dict(full, **{"tls-cert-file": pki.node_key})).startswith(
        "tls-cert-file: %s is not a PEM certificate" % pki.node_key)
    assert _refusal(tmp_path, dict(full, **{"tls-ciphers": "NO-SUCH-CIPHER"})).startswith(
        "tls-ciphers: 'NO-SUCH-CIPHER'")
    assert _refusal(tmp_path, dict(full, **{"tls-ca-cert-dir": str(tmp_path / "none")})).startswith(
        "tls-ca-cert-dir: %s is not a directory" % (tmp_path / "none"))


def test_no_ca_is_needed_when_nothing_is_verified(tmp_path, pki):
    service, _ = build(tmp_path, **{"tls-port": "7712", "tls-auth-clients": "no", "tls-cert-file": pki.node,
                                    "tls-key-file": pki.node_key})
    assert service.tls.current["clients"].get_verify_mode() == SSL.VERIFY_NONE


def test_a_ca_directory_serves_as_the_trust_root(tmp_path, pki):
    service, _ = build(tmp_path, **{"tls-port": "7712", "tls-cert-file": pki.node, "tls-key-file": pki.node_key,
                                    "tls-ca-cert-dir": pki.dir})
    assert service.tls.current["clients"].get_verify_mode() & SSL.VERIFY_PEER


def test_config_set_reloads_the_certificates_for_new_connections(tmp_path, pki):
    import shutil

    cert, key = str(tmp_path / "live.crt"), str(tmp_path / "live.key")
    shutil.copy(pki.node, cert)
    shutil.copy(pki.node_key, key)
    service, _ = build(tmp_path, **node_directives(pki, **{"tls-port": "7712", "tls-cert-file": cert,
                                                           "tls-key-file": key}))
    service.startService()
    try:
        before = service.tls.current["clients"]
        assert subject(service, "clients") == "disque node"
        # renewed in place (cert and key together), then CONFIG SET of the same path
        shutil.copy(pki.node2, cert)
        shutil.copy(pki.node2_key, key)
        assert subject(service, "clients") == "disque node"  # nothing reads the files by itself
        assert command(service, b"CONFIG SET tls-cert-file " + cert.encode()) == b"+OK\r\n"
        assert service.tls.current["clients"] is not before and subject(service, "clients") == "disque node2"
        # a set that leaves no usable certificate is refused, and changes nothing
        current = service.tls.current
        reply = command(service, b"CONFIG SET tls-cert-file /nonexistent.crt")
        assert reply == (b"-ERR Unable to update TLS configuration: tls-cert-file: can't read /nonexistent.crt: "
                         b"No such file or directory\r\n")
        assert service.tls.current is current
        assert command(service, b"CONFIG GET tls-cert-file") == b"*2\r\n$13\r\ntls-cert-file\r\n$%d\r\n%s\r\n" % (
            len(cert), cert.encode())
        assert command(service, b"CONFIG SET tls-auth-clients optional") == b"+OK\r\n"
        assert service.tls.current["clients"].get_verify_mode() == SSL.VERIFY_PEER
        assert command(service, b"CONFIG SET tls-port 7713").startswith(b"-ERR Unsupported CONFIG parameter")
    finally:
        service.stopService()


def test_tls_directives_without_tls_port_are_kept_and_unused(tmp_path, pki):
    service, reactor = build(tmp_path, **node_directives(pki))
    service.startService()
    try:
        assert service.tls is None
        assert [kind for _, _, kind, _ in listeners(reactor)] == ["plain", "plain"]
        assert command(service, b"CONFIG SET tls-cert-file /nonexistent.crt") == b"+OK\r\n"  # nothing to reload
    finally:
        service.stopService()


def test_tls_cluster_wraps_configured_bus_endpoints_too(tmp_path, pki):
    """cluster-listen and cluster-connect name the transport under the TLS."""
    service, reactor = build(tmp_path, **node_directives(pki, **{
        "tls-port": "7712", "tls-cluster": "yes", "cluster-listen": "tcp:17950:interface=127.0.0.4",
        "cluster-connect": "tcp:timeout=9"}))
    service.startService()
    try:
        assert listeners(reactor)[-1] == (17950, "127.0.0.4", "tls", "bus")
        assert meet_a_peer(service, reactor) == ("127.0.0.1", 17712, 9, None)
        assert isinstance(link_factory(reactor), TLSMemoryBIOFactory)
    finally:
        service.stopService()


def test_a_tls_link_is_up_when_its_handshake_is_done_not_when_tcp_connects(tmp_path, pki):
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    from disque.bus.links import _LinkFactory
    from tests.support.memory import captured_log, texts

    service, reactor = build(tmp_path, **node_directives(pki, **{"tls-port": "7712", "tls-cluster": "yes"}))
    service.startService()
    try:
        meet_a_peer(service, reactor)
        (link,) = service.runtime.links.by_id.values()
        link_protocols = _LinkFactory(link)  # the link's own factory (ClientService wraps it, then TLS)
        with captured_log() as events:
            for _ in range(2):  # two attempts refused by the peer's certificate: one warning
                proto = link_protocols.buildProtocol(None)
                proto.makeConnection(StringTransport())
                assert link.protocol is None  # TCP is up, the link is not
                proto.connectionLost(Failure(ConnectionError("certificate verify failed")))
        assert [t for t in texts(events) if "TLS" in t] == [
            "Bus link to %s: no TLS handshake (certificate verify failed), retrying" % link.describe()]
        proto = link_protocols.buildProtocol(None)
        proto.makeConnection(StringTransport())
        proto.handshakeCompleted()
        assert link.protocol is proto and not link.tls_failing
    finally:
        service.stopService()
