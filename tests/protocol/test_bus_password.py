"""cluster-password on real nodes over the real bus protocol, in memory
(disque.testing.IOSimCluster): who gets in, who does not, and what is
counted.  The handshake itself is tested pure in test_bus_auth."""

import struct

import pytest
from twisted.internet.protocol import Protocol

from disque.bus import auth, wire
from disque.core import messages
from disque.testing import IOSimCluster


def fields(text):
    return dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)


def stat(client, name):
    return int(fields(client.call("INFO", "STATS"))[name.encode()])


def known_nodes(client):
    return [line for line in client.call("CLUSTER", "NODES").split(b"\n") if line]


def met(cluster, i, j):
    cluster.client(i).call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[j])
    cluster.advance(3.0)


class Stranger(Protocol):
    """Someone on the bus port who does not know the password."""

    def __init__(self):
        self.received = b""
        self.lost = False

    def dataReceived(self, data):
        self.received += data

    def connectionLost(self, reason=None):
        self.lost = True

    def send_frame(self, frame):
        self.transport.write(struct.pack(">I", len(frame)) + frame)


def a_ping_from(sender_id):
    return wire.encode(messages.Header(sender=sender_id, port=7999, flags=0, host=b"127.0.0.1"),
                       messages.Ping(gossip=()))


@pytest.fixture
def cluster(tmp_path):
    cluster = IOSimCluster(3, tmp_path, overrides={"cluster-password": "s3cret"})
    yield cluster
    cluster.stop()


def test_nodes_with_the_password_meet_and_replicate(cluster):
    met(cluster, 0, 1)
    a, b = cluster.client(0), cluster.client(1)
    assert len(known_nodes(a)) == len(known_nodes(b)) == 2
    job_id = a.call("ADDJOB", "q", "body", 5000, "REPLICATE", 2)
    assert job_id.startswith(b"D-") and b.call("SHOW", job_id) is not None
    assert stat(a, "bus_auth_failures") == stat(b, "bus_auth_failures") == 0
    # every connection between them began with the handshake, not a message
    assert all(isinstance(m, wire.WireError) for _, _, m in cluster.frames[:4])


def test_a_node_with_another_password_cannot_join(cluster):
    c = cluster.client(2)
    assert c.call("CONFIG", "SET", "cluster-password", "guess") == b"OK"
    met(cluster, 0, 2)
    a = cluster.client(0)
    assert len(known_nodes(c)) == 1  # C learned nothing of A
    assert b"handshake" in b"".join(known_nodes(a)) or len(known_nodes(a)) == 1
    assert not [m for s, r, m in cluster.frames if not isinstance(m, wire.WireError)]  # no message got through
    assert stat(a, "bus_auth_failures") >= 1 and stat(c, "bus_auth_failures") >= 1


def test_a_node_without_a_password_gets_no_message_in(cluster):
    c = cluster.client(2)
    assert c.call("CONFIG", "SET", "cluster-password", "") == b"OK"
    c.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[0])  # C's MEET reaches A's bus port first
    cluster.advance(3.0)
    a = cluster.client(0)
    assert len(known_nodes(a)) == 1 and len(known_nodes(c)) <= 2
    assert stat(a, "bus_auth_failures") >= 1


def test_a_stranger_sending_a_valid_frame_is_dropped_and_counted(cluster):
    a = cluster.client(0)
    stranger = cluster.connect(0, Stranger(), bus=True)
    assert stranger.received.startswith(struct.pack(">I", 3 + auth.NONCE_LEN) + auth.MAGIC)  # A's challenge
    stranger.send_frame(a_ping_from(b"f" * 40))
    cluster.pump()
    assert stranger.lost
    assert len(known_nodes(a)) == 1
    assert stat(a, "bus_auth_failures") == 1


def test_a_big_frame_before_the_handshake_is_refused(cluster):
    a = cluster.client(0)
    stranger = cluster.connect(0, Stranger(), bus=True)
    stranger.transport.write(struct.pack(">I", 100 * 1024 * 1024))  # announces 100 MB
    cluster.pump()
    assert stranger.lost and stat(a, "bus_auth_failures") == 1


def test_a_silent_connection_is_closed_after_the_handshake_timeout(cluster):
    a = cluster.client(0)
    stranger = cluster.connect(0, Stranger(), bus=True)
    cluster.advance(auth.TIMEOUT - 0.5)
    assert not stranger.lost
    cluster.advance(1.0)
    assert stranger.lost and stat(a, "bus_auth_failures") == 1


def test_the_password_changes_for_the_next_connections(tmp_path):
    cluster = IOSimCluster(2, tmp_path)
    try:
        a, b = cluster.client(0), cluster.client(1)
        met(cluster, 0, 1)
        for client in (a, b):
            assert client.call("CONFIG", "SET", "cluster-password", "new") == b"OK"
            assert client.call("CONFIG", "GET", "cluster-password") == [b"cluster-password", b"new"]
        stranger = cluster.connect(1, Stranger(), bus=True)
        stranger.send_frame(a_ping_from(b"f" * 40))
        cluster.pump()
        assert stranger.lost and stat(b, "bus_auth_failures") == 1
        cluster.cut(0, 1)  # the links reconnect, now with the handshake
        cluster.heal()
        cluster.advance(5.0)
        job_id = a.call("ADDJOB", "q", "body", 5000, "REPLICATE", 2)
        assert job_id.startswith(b"D-") and b.call("SHOW", job_id) is not None
        assert stat(a, "bus_auth_failures") == 0
    finally:
        cluster.stop()
