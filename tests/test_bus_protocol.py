"""The bus adapter in memory: framing, bad peers dropped, frames reach the
runtime."""

import struct

from twisted.internet.testing import StringTransport

from disque.bus import wire
from disque.bus.protocol import MAX_FRAME, BusProtocol
from disque.core import messages


class Recorder:
    def __init__(self):
        self.got = []
        self.lost = []
        self.inbound = []
        self.batches = []
        self.depth = 0
        self.pending_output = []  # as NodeRuntime: connections to flush when a batch ends
        self.bus_sendbuf_limit = 0  # cluster-link-sendbuf-limit

    def bus_batch_begin(self):
        self.depth += 1
        self.batches.append(len(self.got))

    def bus_batch_end(self):
        self.depth -= 1

    def bus_message(self, header, msg, link):
        self.got.append((header, msg, link))

    def bus_link_lost(self, proto):
        self.lost.append(proto)

    def bus_inbound(self, proto):
        self.inbound.append(proto.sender)

    def bus_inbound_lost(self, proto):
        self.lost.append(proto)


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
