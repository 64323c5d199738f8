"""disque.io.batch_output: replies leave when the batch ends, after the AOF, in one
write, straight to the socket when the transport holds nothing.

write_now is checked on Twisted's real TCP transport class around a real
kernel socket pair (no reactor needed: the transport's buffers and its
``write`` are what matter), so a Twisted release that renames the buffers
it reads fails here, not in production."""

import os
import socket

import pytest
from twisted.internet import tcp
from twisted.internet.testing import StringTransport

from disque.io import files
from disque.io.batch_output import write_now
from tests.support.memory import cmd


class Transport(tcp.Server):
    """Twisted's TCP server transport on one end of a socket pair, its
    ``write`` (the buffered path) recorded instead of registered with a
    reactor.  The class is a subclass, so write_now must not take it for
    tcp.Server: see ``tcp_transport``."""


def tcp_transport(sock):
    t = tcp.Server.__new__(tcp.Server)  # the very class write_now knows, without a reactor
    t.socket = sock
    t.connected = True
    t.disconnecting = False
    t._writeDisconnected = False
    t._tempDataBuffer = []
    t._tempDataLen = 0
    t.dataBuffer = b""
    t.offset = 0
    t.written = []
    t.write = t.written.append
    return t


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def received(sock):
    chunks = []
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def test_nothing_buffered_goes_straight_to_the_socket(pair):
    a, b = pair
    t = tcp_transport(a)
    write_now(t, b"+OK\r\n")
    assert received(b) == b"+OK\r\n" and t.written == []


def test_something_buffered_keeps_its_place_in_line(pair):
    a, b = pair
    t = tcp_transport(a)
    t._tempDataBuffer = [b"first"]
    write_now(t, b"second")
    assert received(b) == b"" and t.written == [b"second"]
    t._tempDataBuffer = []
    t.dataBuffer, t.offset = b"partly sent", 6  # doWrite's own buffer, not yet drained
    write_now(t, b"third")
    assert received(b) == b"" and t.written == [b"second", b"third"]


def test_what_the_kernel_does_not_take_is_buffered(pair):
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    t = tcp_transport(a)
    data = os.urandom(4 << 20)
    write_now(t, data)
    got = received(b)
    assert 0 < len(got) < len(data)
    assert got + b"".join(t.written) == data  # the rest, in order, through write()


def test_a_closing_or_lost_connection_takes_the_ordinary_path(pair):
    a, b = pair
    t = tcp_transport(a)
    t.disconnecting = True  # loseConnection(): Twisted sends what it holds, then closes
    write_now(t, b"bye")
    assert t.written == [b"bye"]
    t = tcp_transport(a)
    b.close()
    a.shutdown(socket.SHUT_WR)  # send() fails: EPIPE
    write_now(t, b"lost")
    assert t.written == [b"lost"]  # Twisted's doWrite finds the lost connection


def test_other_transports_take_the_ordinary_path(pair):
    a, b = pair
    t = tcp_transport(a)
    t.__class__ = Transport  # not one of the classes whose buffers write_now reads
    write_now(t, b"x")
    assert t.written == [b"x"] and received(b) == b""
    s = StringTransport()
    write_now(s, b"y")
    assert s.value() == b"y"


def test_a_batch_is_written_once_after_the_aof(make, monkeypatch):
    node = make(appendonly="yes", appendfsync="always")
    conn = node.connect()
    order = []
    real_fsync, real_write = files.os.fsync, conn.tr.write

    def fsync(fd):
        order.append("fsync")
        return real_fsync(fd)

    def write(data):
        order.append(("write", data.count(b"\r\n")))
        return real_write(data)

    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(conn.tr, "write", write)
    conn.proto.dataReceived(cmd("ADDJOB", "q", "a", "0") + cmd("ADDJOB", "q", "b", "0") + cmd("PING"))
    # the two jobs' records synced first, then the three replies in one write
    assert order == ["fsync", ("write", 3)]
    assert conn.take().endswith(b"+PONG\r\n")
    assert node.runtime.effects.pending_output == []


def test_a_parked_reply_leaves_when_its_batch_ends(make):
    node = make()
    waiter, producer = node.connect(), node.connect()
    waiter.proto.dataReceived(cmd("GETJOB", "FROM", "q"))
    assert waiter.take() == b""
    producer.proto.dataReceived(cmd("ADDJOB", "q", "job", "0"))
    assert b"job" in waiter.take()  # delivered in the producer's batch, flushed at its end
    assert node.runtime.effects.pending_output == []
