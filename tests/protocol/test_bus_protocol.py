"""The bus adapter in memory: framing, bad peers dropped, frames reach the
runtime."""

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from disque.bus import auth, wire
from disque.bus.protocol import MAX_FIRST_FRAME, MAX_FRAME, MAX_UNPROVEN, BusProtocol, BusServerFactory
from disque.core import messages


class Recorder:
    def __init__(self):
        self.got = []
        self.lost = []
        self.inbound = []
        self.batches = []
        self.depth = 0
        self.effects = self  # as BusHub: its effects keep the connections to flush when a batch ends
        self.pending_output = []
        self.bus_sendbuf_limit = 0  # cluster-link-sendbuf-limit
        self.members = {b"a" * 40}  # node IDs bus_member says are members (HEADER's sender)
        self.failures = []  # (source, reason) of bus_auth_failed
        self.reactor = Clock()
        self.loading = False

    def bus_batch_begin(self):
        self.depth += 1
        self.batches.append(len(self.got))

    def bus_batch_end(self):
        self.depth -= 1

    def bus_message(self, header, msg, link):
        self.got.append((header, msg, link))

    def bus_link_lost(self, proto):
        self.lost.append(proto)

    def bus_member(self, node_id):
        return node_id in self.members

    def bus_inbound(self, proto):
        self.inbound.append(proto.sender)

    def bus_auth_failed(self, source, reason):
        self.failures.append((source, reason))

    def bus_inbound_lost(self, proto):
        self.lost.append(proto)

    def bus_handshake(self, initiator):
        return None  # no cluster-password (tests/protocol/test_bus_password.py has them)


def connect(node_id=None):
    runtime = Recorder()
    proto = BusProtocol(runtime, node_id)
    tr = StringTransport()
    proto.makeConnection(tr)
    return runtime, proto, tr


HEADER = messages.Header(b"a" * 40, b"", 7711, 0)


def frame(msg):
    data = wire.encode(HEADER, msg)
    return struct.pack(">I", len(data)) + data


def test_frames_in_any_split_reach_the_runtime():
    runtime, proto, tr = connect()
    data = frame(messages.Ping(())) + frame(messages.DelJob(b"D" * 40))
    for i in range(len(data)):
        proto.dataReceived(data[i:i + 1])
    assert [m for _, m, _ in runtime.got] == [messages.Ping(()), messages.DelJob(b"D" * 40)]
    assert runtime.got[0][2] is proto and not tr.disconnecting


def test_frames_of_one_read_are_one_batch():
    runtime, proto, tr = connect()
    proto.dataReceived(frame(messages.Ping(())) + frame(messages.Pong(())) + frame(messages.DelJob(b"D" * 40)))
    assert len(runtime.got) == 3 and runtime.batches == [0] and runtime.depth == 0


def test_garbage_drops_the_link_and_nothing_after_it_is_processed():
    runtime, proto, tr = connect()
    bad = b"garbage!"
    proto.dataReceived(struct.pack(">I", len(bad)) + bad + frame(messages.Ping(())))
    assert runtime.got == [] and tr.disconnecting


def test_oversized_length_drops_the_link_without_buffering():
    runtime, proto, tr = connect()
    proto.dataReceived(struct.pack(">I", MAX_FRAME + 1) + b"x" * 100)
    assert tr.disconnecting and runtime.got == []


def test_outbound_link_reports_its_loss():
    runtime, proto, tr = connect(node_id=b"b" * 40)
    proto.connectionLost(None)
    assert runtime.lost == [proto]
    rt2, inbound, _ = connect()
    inbound.connectionLost(None)
    assert rt2.lost == []


def test_send_frame_writes_length_prefixed_frames_when_the_batch_ends():
    runtime, proto, tr = connect()
    proto.send_frame(wire.encode(HEADER, messages.Pong(())))
    proto.send_frame(wire.encode(HEADER, messages.Ping(())))
    assert tr.value() == b"" and runtime.pending_output == [proto]  # kept until the batch ends
    proto.flush()
    assert tr.value() == frame(messages.Pong(())) + frame(messages.Ping(()))
    proto.flush()  # nothing more
    assert tr.value() == frame(messages.Pong(())) + frame(messages.Ping(()))
    proto.close()
    proto.send_frame(b"ignored")
    proto.flush()
    assert tr.value() == frame(messages.Pong(())) + frame(messages.Ping(()))


# -- limits (docs/limits.md) --

def test_a_connection_to_the_bus_port_must_speak_before_sending_big_frames():
    runtime, proto, tr = connect()
    proto.dataReceived(struct.pack(">I", MAX_FIRST_FRAME + 1))
    assert tr.disconnecting and runtime.got == []
    runtime, proto, tr = connect()
    proto.dataReceived(frame(messages.Ping(())))          # a peer: it said who it is
    big = wire.encode(HEADER, messages.ReplJob(_record(b"x" * (2 * MAX_FIRST_FRAME))))
    proto.dataReceived(struct.pack(">I", len(big)) + big)
    assert not tr.disconnecting and runtime.got[-1][1].job.body == b"x" * (2 * MAX_FIRST_FRAME)
    runtime, proto, tr = connect(node_id=b"b" * 40)            # our own link to a known peer
    proto.dataReceived(struct.pack(">I", len(big)) + big)
    assert not tr.disconnecting


def _record(body):
    return messages.JobRecord(b"D" * 40, b"q", body, 1, 0, 10 ** 12, 0, 0, 0, 0, ())


def test_a_big_frame_in_small_reads_is_joined_once():
    runtime, proto, tr = connect(node_id=b"b" * 40)
    data = frame(messages.Ping(())) + frame(messages.DelJob(b"D" * 40)) * 3
    body = b"z" * 3_000_000
    payload = wire.encode(HEADER, messages.ReplJob(_record(body)))
    data += struct.pack(">I", len(payload)) + payload + frame(messages.Pong(()))
    held = []
    for i in range(0, len(data), 65536):
        proto.dataReceived(data[i:i + 65536])
        held.append(len(proto._unprocessed))
    assert [type(m) for _, m, _ in runtime.got] == [messages.Ping] + [messages.DelJob] * 3 + [
        messages.ReplJob, messages.Pong]
    assert runtime.got[4][1].job.body == body
    assert max(held) < 65536  # the body waited aside, not in Twisted's buffer


def test_a_peer_that_catches_up_is_counted_again_from_zero():
    runtime, proto, tr = connect(node_id=b"b" * 40)
    runtime.bus_sendbuf_limit = 250_000
    for _ in range(2):
        proto.pauseProducing()
        for _ in range(2):
            proto.send_frame(b"f" * 100_000)
            proto.flush()
        proto.resumeProducing()
    assert not tr.disconnected and not proto.closed
    proto.pauseProducing()
    for _ in range(3):
        proto.send_frame(b"f" * 100_000)
        proto.flush()
        proto.pauseProducing()  # as Twisted, at each write while the buffer is full
    assert tr.disconnected and proto.closed
    proto.send_frame(b"late")
    proto.flush()                                          # nothing more is written
    assert len(tr.value()) == 7 * 100_004


# -- strangers on the bus port (docs/limits.md, docs/security.md) --

STRANGER = IPv4Address("TCP", "10.0.0.9", 40000)


def accept(factory, address=STRANGER):
    """A connection to the bus port, as the listening port makes it."""
    proto = factory.buildProtocol(address)
    tr = StringTransport(peerAddress=address)
    proto.makeConnection(tr)
    return proto, tr


def test_connections_still_to_prove_themselves_are_capped():
    runtime = Recorder()
    factory = BusServerFactory(runtime)
    waiting = [accept(factory) for _ in range(MAX_UNPROVEN)]
    assert not any(tr.disconnecting for _, tr in waiting) and runtime.failures == []
    _, tr = accept(factory)
    assert tr.disconnected  # closed at once, counted and logged as a failure
    assert runtime.failures == [("10.0.0.9", "%d bus connections are still to prove themselves (at most %d)"
                                 % (MAX_UNPROVEN, MAX_UNPROVEN))]
    waiting[0][0].dataReceived(frame(messages.Ping(())))  # one speaks the protocol: room for one more
    _, tr = accept(factory)
    assert not tr.disconnecting
    waiting[1][0].connectionLost(None)  # one goes away: room again
    _, tr = accept(factory)
    assert not tr.disconnecting and len(factory.unproven) == MAX_UNPROVEN
    _, tr = accept(factory)
    assert tr.disconnected and len(runtime.failures) == 2


def test_a_connection_that_sends_no_frame_in_time_is_closed_and_counted():
    runtime = Recorder()
    factory = BusServerFactory(runtime)
    silent, silent_tr = accept(factory)
    slow, slow_tr = accept(factory)
    garbage, garbage_tr = accept(factory)
    garbage.dataReceived(struct.pack(">I", 3) + b"DQ!")  # bytes, but no frame that decodes
    runtime.reactor.advance(auth.TIMEOUT - 0.1)
    slow.dataReceived(frame(messages.Ping(())))  # just in time
    assert not silent_tr.disconnecting and not slow_tr.disconnecting
    runtime.reactor.advance(0.2)
    assert silent_tr.disconnecting and not slow_tr.disconnecting
    assert runtime.failures == [("10.0.0.9", "no bus message within %g s" % auth.TIMEOUT)]
    assert factory.unproven == set() and not runtime.reactor.getDelayedCalls()
    runtime.reactor.advance(3600)  # a connection that proved itself has no deadline any more
    assert not slow_tr.disconnecting


def test_a_cluster_password_handshake_in_progress_is_unproven_until_done():
    class WithPassword(Recorder):
        nonces = auth.Nonces()

        def bus_handshake(self, initiator):
            return auth.Handshake(b"s3cret", initiator, self.nonces)

    runtime = WithPassword()
    factory = BusServerFactory(runtime)
    proto, tr = accept(factory)
    assert factory.unproven == {proto}
    peer = auth.Handshake(b"s3cret", True, auth.Nonces())
    challenge = tr.value()[4:]
    tr.clear()
    proto.dataReceived(struct.pack(">I", 19) + peer.hello())
    proof = peer.receive(challenge)
    proto.dataReceived(struct.pack(">I", len(proof)) + proof)
    assert proto.authenticated and factory.unproven == set() and not runtime.reactor.getDelayedCalls()
    proto, tr = accept(factory)
    runtime.reactor.advance(auth.TIMEOUT)
    assert tr.disconnecting and factory.unproven == set()
    assert runtime.failures == [("10.0.0.9", "no handshake within %g s" % auth.TIMEOUT)]


def test_the_bus_port_closes_connections_while_the_node_loads():
    runtime = Recorder()
    runtime.loading = True
    factory = BusServerFactory(runtime)
    _, tr = accept(factory)
    assert tr.disconnected and factory.unproven == set() and runtime.failures == []


def test_a_non_member_may_send_small_frames_only_and_its_connection_is_no_route():
    """A stranger's frames reach the core (which ignores them), but its
    connection stays limited to MAX_FIRST_FRAME and is not taken as any
    node's: frames for a member never go to a stranger claiming its ID."""
    runtime, proto, tr = connect()
    runtime.members = set()
    proto.dataReceived(frame(messages.Ping(())))
    assert len(runtime.got) == 1 and runtime.inbound == [] and proto.sender is None
    big = wire.encode(HEADER, messages.ReplJob(_record(b"x" * (2 * MAX_FIRST_FRAME))))
    proto.dataReceived(struct.pack(">I", len(big)) + big)
    assert tr.disconnecting and len(runtime.got) == 1
    runtime, proto, tr = connect()  # a member: its connection is its own, big frames too
    proto.dataReceived(frame(messages.Ping(())))
    assert runtime.inbound == [HEADER.sender] and proto.MAX_LENGTH == MAX_FRAME
