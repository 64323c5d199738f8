"""The limits that protect a node (docs/limits.md), in memory: what each
one counts and what happens past it.  tests/test_e2e_limits.py runs the
same hostile clients and peers against real node processes."""

import struct

from twisted.internet.testing import StringTransport

from disque.bus import wire
from disque.bus.protocol import MAX_FIRST_FRAME, BusProtocol
from disque.core import messages
from disque.resp.codec import ARG_OVERHEAD, RequestParser
from test_bus_protocol import HEADER, Recorder, frame
from test_directives import captured_log, make, texts  # noqa: F401 (make: a fixture)
from test_protocol import cmd

# -- the query buffer ------------------------------------------------------------


def test_parser_holds_the_arguments_of_an_incomplete_request():
    p = RequestParser()
    p.feed(b"*4\r\n$3\r\nfoo\r\n$5\r\nab")
    assert p.parse() == [] and p.pending() == 2 and p.held() == 2 + 3 + ARG_OVERHEAD  # "ab" and foo
    p.feed(b"cde\r\n$2\r\n")
    assert p.parse() == [] and p.pending() == 0 and p.held() == 3 + 5 + 2 * ARG_OVERHEAD
    p.feed(b"xy\r\n$1\r\nz\r\n*2\r\n$1\r\nq")
    assert p.parse() == [[b"foo", b"abcde", b"xy", b"z"]]
    assert p.held() == p.pending() == 1  # the next request's first payload, not complete
    p.feed(b"\r\n")
    assert p.parse() == [] and p.held() == 1 + ARG_OVERHEAD and p.pending() == 0


def test_a_protocol_error_lets_go_of_what_the_parser_held():
    p = RequestParser(max_bulk_len=10)
    p.feed(b"*3\r\n$3\r\nfoo\r\n$11\r\n")
    try:
        p.parse()
    except Exception as e:
        assert e.args[0] == b"Protocol error: invalid bulk length"
    assert p.held() == 0 and p.pending() == 0


def test_requests_queued_behind_a_parked_command_count_until_they_run(make):
    node = make(**{"client-query-buffer-limit": "1mb"})
    c, other = node.connect(), node.connect()
    c.proto.dataReceived(cmd("GETJOB", "FROM", "q"))      # parks: what follows waits
    big = cmd("PING", "x" * 300_000)
    for _ in range(3):
        c.proto.dataReceived(big)
    assert not c.closed and c.proto.queued > 900_000
    other.call("ADDJOB", "q", "job", "0")                 # GETJOB gets it, the PINGs run
    assert c.take().count(b"$300000\r\n") == 3 and c.proto.queued == 0
    c.proto.dataReceived(cmd("GETJOB", "FROM", "q"))      # parks again: the count starts from 0
    for _ in range(3):
        c.proto.dataReceived(big)
    assert not c.closed
    with captured_log() as events:
        c.proto.dataReceived(big)                         # 1.2 MB waiting: closed
    assert c.closed and c.tr.disconnected and c.proto.pending == type(c.proto.pending)()
    assert any("max query buffer length" in t for t in texts(events))
    assert node.connect().call("PING") == b"+PONG\r\n"


def test_a_client_parked_by_one_request_of_many_counts_the_rest(make):
    node = make(**{"client-query-buffer-limit": "1mb"})
    c = node.connect()
    c.proto.dataReceived(cmd("GETJOB", "FROM", "q") + cmd("PING", "x" * 600_000))
    assert not c.closed and c.proto.queued >= 600_000
    c.proto.dataReceived(cmd("PING", "x" * 600_000))
    assert c.closed


# -- the output buffer -------------------------------------------------------------


def test_a_hard_output_limit_stops_a_pipeline_of_big_replies_as_it_is_made(make):
    """Twenty SHOWs of a 200 KB job in one read: 4 MB of replies.  With a
    1 MB hard limit the client is dropped after the sixth, and the replies
    made are let go, not written."""
    for value, dropped in (("normal 0 0 0", False), ("normal 1mb 0 0", True)):
        node = make(**{"client-output-buffer-limit": value})
        job = node.connect().call("ADDJOB", "q", "b" * 200_000, "0").split(b"\r\n")[0][1:].decode()
        c = node.connect()
        shows = []
        real = node.runtime.dispatch

        def counting(ctx, client, argv):
            shows.append(argv[0])
            return real(ctx, client, argv)

        node.runtime.dispatch = counting
        with captured_log() as events:
            c.proto.dataReceived(cmd("SHOW", job) * 20)
        node.runtime.dispatch = real
        assert c.closed is dropped and c.tr.disconnected is dropped
        if dropped:
            assert c.take() == b"" and len(shows) == 6
            assert any("output buffer limits" in t for t in texts(events))
        else:
            assert c.take().count(b"b" * 200_000) == 20 and len(shows) == 20


# -- the cluster bus ---------------------------------------------------------------


def bus(node_id=None):
    runtime = Recorder()
    proto = BusProtocol(runtime, node_id)
    tr = StringTransport()
    proto.makeConnection(tr)
    return runtime, proto, tr


def test_a_connection_to_the_bus_port_must_speak_before_sending_big_frames():
    runtime, proto, tr = bus()
    proto.dataReceived(struct.pack(">I", MAX_FIRST_FRAME + 1))
    assert tr.disconnecting and runtime.got == []
    runtime, proto, tr = bus()
    proto.dataReceived(frame(messages.Ping(())))          # a peer: it said who it is
    big = wire.encode(HEADER, messages.ReplJob(_record(b"x" * (2 * MAX_FIRST_FRAME))))
    proto.dataReceived(struct.pack(">I", len(big)) + big)
    assert not tr.disconnecting and runtime.got[-1][1].job.body == b"x" * (2 * MAX_FIRST_FRAME)
    runtime, proto, tr = bus(node_id=b"b" * 40)            # our own link to a known peer
    proto.dataReceived(struct.pack(">I", len(big)) + big)
    assert not tr.disconnecting


def _record(body):
    return messages.JobRecord(b"D" * 40, b"q", body, 1, 0, 10 ** 12, 0, 0, 0, 0, ())


def test_a_big_frame_in_small_reads_is_joined_once():
    runtime, proto, tr = bus(node_id=b"b" * 40)
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
    runtime, proto, tr = bus(node_id=b"b" * 40)
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
    assert tr.disconnected and proto.closed
    proto.send_frame(b"late")
    proto.flush()                                          # nothing more is written
    assert len(tr.value()) == 7 * 100_004
