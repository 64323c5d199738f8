"""Regression tests for the node bugs ``tests/tools/fuzz.py`` found (docs/fuzzing.md),
each on the RESP adapter in memory (StringTransport, no sockets)."""

import gc
import platform
import weakref

import hiredis
import pytest

from disque.commands.jobs import MAX_JOB_SECONDS
from disque.resp.codec import ProtocolError, RequestParser
from tests.support.memory import cmd, connect, make_runtime, take


def replies(data: bytes) -> list:
    """Every reply in ``data``; fails if it is not valid RESP."""
    reader = hiredis.Reader()
    reader.feed(data)
    out = []
    while True:
        r = reader.gets()
        if r is False:
            return out
        out.append(r)


def test_refused_commands_leave_no_connection_behind():
    """The handlers raise shared CommandError instances, and each raise
    chained its traceback onto the previous one: every refused command's
    frames, client and connection stayed alive (RSS grew ~3 KB a request
    under the live fuzzer)."""
    runtime, _clock = make_runtime()
    gone = []  # weak references to this test's connections only (other
    # tests of the same process may have left theirs to the collector)
    for i in range(200):
        proto, transport = connect(runtime)
        gone.append(weakref.ref(proto))
        proto.dataReceived(cmd("ADDJOB", "q", "body", "0", "RETRY", "-1") + cmd("ADDJOB", "q", "b", "0", "bogus"))
        assert [type(r) for r in replies(take(transport))] == [hiredis.ReplyError] * 2
        proto.connectionLost(None)
    del proto, transport
    gc.collect()
    assert sum(1 for ref in gone if ref() is not None) == 0


@pytest.mark.parametrize("request_bytes", [
    cmd("H\r\nX\nY"),  # unknown command: the name is quoted in the error
    b"*1\r\n\n",  # the codec's "expected '$', got '<byte>'" with a LF
    b"*1\r\n\r\r\n",  # ... and a CR
    cmd("CLUSTER", "MEET", "127.0.0.1", "1\r\n2"),  # reply.err quoting an argument
])
def test_error_lines_quoting_client_bytes_stay_one_line(request_bytes):
    runtime, _clock = make_runtime()
    proto, transport = connect(runtime)
    proto.dataReceived(request_bytes + cmd("PING"))
    out = take(transport)
    got = replies(out)  # with the CR/LF quoted, the stream broke here
    assert isinstance(got[0], hiredis.ReplyError) and out.count(b"\r\n") == len(got)


def test_codec_error_names_a_cr_or_lf_as_a_space():
    p = RequestParser()
    p.feed(b"*1\r\n\n4\r\nPING\r\n")
    with pytest.raises(ProtocolError) as e:
        p.parse()
    assert e.value.args[0] == b"Protocol error: expected '$', got ' '"


def test_qpeek_with_the_most_negative_count_answers():
    """``QPEEK q -9223372036854775808``: islice() refused 2**63 and the
    exception escaped to the reactor (no reply at all)."""
    runtime, _clock = make_runtime()
    proto, transport = connect(runtime)
    proto.dataReceived(cmd("ADDJOB", "q", "a", "0") + cmd("ADDJOB", "q", "b", "0"))
    take(transport)
    proto.dataReceived(cmd("QPEEK", "q", "-9223372036854775808") + cmd("QPEEK", "q", "9223372036854775807"))
    newest, oldest = replies(take(transport))
    assert [j[2] for j in newest] == [b"b", b"a"] and [j[2] for j in oldest] == [b"a", b"b"]


@pytest.mark.parametrize("option", ["TTL", "RETRY", "DELAY"])
def test_addjob_refuses_times_whose_milliseconds_overflow_64_bits(option):
    """``ADDJOB q b 0 RETRY 1180110141127686292`` was accepted; SHOW then
    answered next-requeue-within beyond 64 bits, which hiredis refuses."""
    runtime, _clock = make_runtime()
    proto, transport = connect(runtime)
    proto.dataReceived(cmd("ADDJOB", "q", "b", "0", option, MAX_JOB_SECONDS + 1, "TTL", MAX_JOB_SECONDS + 2))
    (error,) = replies(take(transport))
    assert str(error) == "ERR TTL, DELAY and RETRY must be at most %d seconds" % MAX_JOB_SECONDS
    proto.dataReceived(cmd("ADDJOB", "q", "b", "0", "TTL", MAX_JOB_SECONDS, "RETRY", MAX_JOB_SECONDS - 1))
    (job_id,) = replies(take(transport))
    proto.dataReceived(cmd("SHOW", job_id))
    (shown,) = replies(take(transport))  # every integer within 64 bits, or hiredis raises
    assert dict(zip(shown[::2], shown[1::2]))[b"retry"] == MAX_JOB_SECONDS - 1


@pytest.mark.skipif(platform.python_implementation() != "CPython",
                    reason="reference cycles matter where the heap is frozen: CPython only (disque/node/heap.py); "
                           "PyPy has no reference counting and gc.collect() counts nothing")
@pytest.mark.parametrize("request_bytes", [
    b"*abc\r\n",
    cmd("PING") + b"*1\r\n$-1\r\n",
    b"PING " + b"a" * (70 * 1024),  # too big inline request
    b'PING "unbalanced\r\n',
])
def test_a_protocol_error_leaves_no_reference_cycle(request_bytes):
    """The parser kept the ProtocolError it raised, whose traceback holds
    the parser's frames: a cycle, with the whole input buffer in it.  The
    node freezes its heap every second (disque.node.heap), and a cycle frozen
    while its connection lived is never collected: the live fuzzer's RSS
    grew ~3 KB per malformed request."""
    runtime, _clock = make_runtime()
    gc.collect()
    proto, transport = connect(runtime)
    proto.dataReceived(request_bytes)
    assert take(transport).endswith(b"\r\n") and proto.closing
    proto.connectionLost(None)
    del proto, transport
    assert gc.collect() == 0
