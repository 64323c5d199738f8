"""The clients' words for why a node cannot be used (disque/client/causes.py)
and when a call gives up on the nodes (ClusterClient._gave_up): at
failover_timeout, or at once when every node failed for a cause that
lasts.  Pure: no socket (tests/process/test_e2e_client_errors.py has the
same causes on real sockets, for both clients)."""

import ssl

import pytest

from disque.client import causes, errors
from disque.client.cluster import ClusterClient
from disque.client.job import Hello, NodeInfo

A, B = ("127.0.0.1", 7711), ("127.0.0.1", 7712)


def test_every_cause_names_the_node_and_its_class():
    addr = "127.0.0.1:7711"
    for error, cls, reason in [
        (causes.refused(addr), errors.ConnectionError, "connection refused"),
        (causes.no_connection(addr, 5.0), errors.ConnectionError, "no connection within 5 s"),
        (causes.no_reply(addr, 0.5), errors.ConnectionError, "no reply within 0.5 s"),
        (causes.not_resp(addr, b"HTTP/1.1 400 Bad Request\r\n" * 3), errors.ProtocolMismatch,
         "does not speak RESP (got b'HTTP/1.1 400 Bad Request\\r\\nHTTP/1.1 400 B'...)"),
        (causes.closed_silently(addr), errors.ProtocolMismatch,
         "does not speak RESP (it closed the connection before answering)"),
        (causes.not_disque(addr, b"OK"), errors.ProtocolMismatch, "is not a Disque node (HELLO answered b'OK')"),
        (causes.tls_failed(addr, "certificate verify failed"), errors.TLSError, "TLS: certificate verify failed"),
    ]:
        assert type(error) is cls and error.address == addr and error.reason == reason
        assert str(error) == "%s: %s" % (addr, reason) and "\n" not in str(error)
    assert not causes.refused(addr).lasting and causes.not_resp(addr, b"x").lasting
    assert not causes.closed_silently(addr).lasting  # a proxy whose node is down does that too


def test_auth_errors_quote_the_node():
    e = causes.auth_failed("h:1", "ERR invalid password")
    assert str(e) == "AUTH failed on node h:1: invalid password"
    assert (e.address, e.code, e.message) == ("h:1", "ERR", "invalid password")
    e = causes.password_required("h:1", "NOAUTH Authentication required.")
    assert str(e) == "node h:1 requires a password (set the 'password' option): NOAUTH Authentication required."
    assert isinstance(e, errors.AuthError) and e.code == "NOAUTH"


def test_a_tls_record_where_resp_was_expected_means_a_tls_port():
    assert causes.looks_like_tls(causes.tls_hello())
    alert = b"\x15\x03\x03\x00\x02\x02\x46"
    assert type(causes.not_resp("h:1", alert)) is errors.TLSError
    assert not causes.looks_like_tls(b"HTTP/1.1") and not causes.looks_like_tls(b"+PONG\r\n")


def test_probes_tell_a_tls_port_from_a_closing_server_and_a_plain_port_from_a_stalled_one():
    silent = causes.closed_silently("h:1")
    assert causes.probe_for(silent, tls=False) == causes.tls_hello()
    assert causes.probe_for(silent, tls=True) is None  # a TLS client: no TLS probe
    assert type(causes.diagnosed(silent, b"\x16\x03\x03\x00\x7a")) is errors.TLSError
    assert causes.diagnosed(silent, b"") is silent and causes.diagnosed(silent, b"HTTP") is silent
    stalled = causes.no_handshake("h:1", 5)
    assert causes.probe_for(stalled, tls=True) == causes.PLAIN_PROBE
    assert causes.probe_for(stalled, tls=False) is None
    for answer in (b"+PONG\r\n", b"-NOAUTH Authentication required.\r\n"):
        better = causes.diagnosed(stalled, answer)
        assert type(better) is errors.TLSError and better.address == "h:1" and "does not serve TLS" in str(better)
    assert causes.diagnosed(stalled, b"") is stalled
    verify = causes.tls_failed("h:1", "certificate verify failed")
    assert causes.probe_for(verify, tls=True) is None


def test_ssl_words_drop_the_codes():
    e = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)")
    assert causes.ssl_words(e) == "tlsv13 alert certificate required"
    e = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    assert causes.ssl_words(e) == "wrong version number"


def test_a_hello_no_disque_node_gives():
    good = [1, b"a" * 40, [b"a" * 40, b"", b"7711", b"1"]]
    assert causes.hello(good, "h:1", host="h") == Hello(1, "a" * 40, (NodeInfo("a" * 40, "h", 7711, 1),))
    redis = [b"server", b"redis", b"version", b"7.0.15", b"proto", 2]
    for reply in (redis, b"OK", None, [], 7):
        with pytest.raises(errors.ProtocolMismatch, match=r"^h:1: is not a Disque node \(HELLO answered "):
            causes.hello(reply, "h:1")


# -- when a call gives up --------------------------------------------------------------

def gave_up(seeds, failures, now=0.0, deadline=30.0):
    client = ClusterClient(seeds)
    for address, error in failures.items():
        client.topology.failed(address, now, error)
    return client._gave_up(now, deadline)


def test_one_node_failing_for_a_lasting_cause_fails_the_call_at_once_with_its_error():
    mismatch = causes.not_resp("127.0.0.1:7711", b"HTTP/1.1")
    assert gave_up([A], {A: mismatch}) is mismatch
    tls = causes.serves_tls("127.0.0.1:7711")
    assert gave_up([A], {A: tls}) is tls


def test_causes_that_may_not_last_are_retried_until_failover_timeout():
    refused, silent = causes.refused("127.0.0.1:7711"), causes.closed_silently("127.0.0.1:7711")
    assert gave_up([A], {A: refused}) is None and gave_up([A], {A: silent}) is None
    e = gave_up([A], {A: refused}, now=30.0)
    assert type(e) is errors.NoNodeAvailable and str(e) == "no node available: 127.0.0.1:7711 (connection refused)"
    # One node that closes every connection: at the deadline, its own error.
    assert gave_up([A], {A: silent}, now=30.0) is silent


def test_several_nodes_give_no_node_available_naming_each():
    mismatch, refused = causes.not_resp("127.0.0.1:7711", b"HTTP/1.1"), causes.refused("127.0.0.1:7712")
    assert gave_up([A, B], {A: mismatch, B: refused}) is None  # B may come back
    e = gave_up([A, B], {A: mismatch, B: refused}, now=30.0)
    assert type(e) is errors.NoNodeAvailable and e.errors == {"127.0.0.1:7711": mismatch, "127.0.0.1:7712": refused}
    assert str(e) == ("no node available: 127.0.0.1:7711 (does not speak RESP (got b'HTTP/1.1')), "
                      "127.0.0.1:7712 (connection refused)")
    tls = causes.serves_tls("127.0.0.1:7712")
    e = gave_up([A, B], {A: mismatch, B: tls})  # both last: at once
    assert type(e) is errors.NoNodeAvailable and set(e.errors) == {"127.0.0.1:7711", "127.0.0.1:7712"}
    assert gave_up([A, B], {A: mismatch}) is None  # B not tried yet
