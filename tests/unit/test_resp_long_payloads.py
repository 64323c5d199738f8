"""Long payloads in the request parser (disque.resp.codec): a request whose
first arguments hold a payload of ``_LONG_PAYLOAD`` bytes or more is cut out
by its lengths (``_cut``), never split at CRLFs, and a payload still
incomplete at the end of a read waits as a view of that read and is copied
once when complete (``_payload``).

Both are pinned to the generic path: every stream gives what the slow path
alone gives (the cut turned off) and what Redis gives fed byte by byte (the
model of test_resp_codec), whole, split at every boundary around a payload,
and split anywhere (hypothesis).
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from disque.resp import codec
from disque.resp.codec import RequestParser

from .test_resp_codec import Cost, RedisModel, run

LONG = codec._LONG_PAYLOAD
DEFAULT_LIMITS = (64 * 1024, 1024 * 1024, 512 * 1024 * 1024)


def mb(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def body(n):
    """``n`` bytes with CRLFs and headers inside: a scan would find them."""
    return (b"\r\n$1\r\n*2\r\n" + bytes(range(256)) * 2)[:64] * (n // 64) + b"x" * (n % 64)


def both(stream, **kw):
    """run(stream, **kw) with the cut and with the generic path alone; they
    must agree (and the result is returned)."""
    with_cut = run(stream, **kw)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(RequestParser, "_cut", lambda self, data, pos, out: -1)
        generic = run(stream, **kw)
    finally:
        mp.undo()
    assert with_cut == generic
    return with_cut


SIZES = [LONG - 1, LONG, LONG + 1, 4095, 4096, 4097, 9999, 10000, 65536]


@pytest.mark.parametrize("size", SIZES)
def test_a_long_payload_whole_and_in_pieces(size):
    payload = body(size)
    stream = mb(b"ADDJOB", b"q", payload, b"0") + mb(b"PING") + mb(b"ADDJOB", b"q", payload, b"0", b"ASYNC")
    expected = ([[b"ADDJOB", b"q", payload, b"0"], [b"PING"], [b"ADDJOB", b"q", payload, b"0", b"ASYNC"]], None)
    assert both(stream) == expected
    for chunk in (1000, 4096, 65536):
        assert both(stream, chunk=chunk) == expected
    assert RedisModel(*DEFAULT_LIMITS).run(stream) == expected


@pytest.mark.parametrize("size", [LONG, 4096, 65536])
def test_cut_at_every_boundary_around_the_payload(size):
    """Two reads, cut at every byte of the headers and of the payload's
    first and last 64 bytes, and the bytes after it."""
    payload = body(size)
    first = mb(b"ADDJOB", b"q", payload, b"0")
    stream = first + mb(b"GETJOB", b"FROM", b"q")
    start = first.index(payload)
    end = start + size
    cuts = [*range(0, start + 64), *range(end - 64, len(stream) + 1)]
    expected = ([[b"ADDJOB", b"q", payload, b"0"], [b"GETJOB", b"FROM", b"q"]], None)
    for cut in cuts:
        assert both(stream, cuts=[cut]) == expected, cut
    for cut in range(start - 8, start + 8):  # three reads: the payload in the middle one
        assert both(stream, cuts=[cut, end - 3]) == expected, cut


HOSTILE = [
    # a length longer than what follows: waits
    b"*2\r\n$4\r\nECHO\r\n$70000\r\n" + b"x" * 5000,
    # a length shorter than the payload: the rest is read as what follows
    b"*2\r\n$4\r\nECHO\r\n$1024\r\n" + b"y" * 1030 + b"\r\n",
    b"*2\r\n$4\r\nECHO\r\n$1024\r\n" + b"y" * 1026 + mb(b"PING"),
    # the 2 bytes after a long payload are not checked
    b"*2\r\n$4\r\nECHO\r\n$2000\r\n" + b"z" * 2000 + b"ab" + mb(b"PING"),
    # lengths that are no canonical number, or too big
    b"*2\r\n$4\r\nECHO\r\n$+2000\r\n" + b"z" * 2002,
    b"*2\r\n$4\r\nECHO\r\n$02000\r\n" + b"z" * 2002,
    b"*2\r\n$4\r\nECHO\r\n$-2000\r\n" + b"z" * 2002,
    b"*2\r\n$4\r\nECHO\r\n$99999999999999999999\r\n" + b"z" * 2002,
    b"*2\r\n$4\r\nECHO\r\n$600000000\r\n" + b"z" * 2002,
    # a NUL in a long payload's header; a header that is not one
    b"*2\r\n$4\r\nECHO\r\n$20\x0000\r\n" + b"z" * 2002,
    b"*2\r\n$4\r\nECHO\r\n:2000\r\n" + b"z" * 2002,
    # a header ended by CR and any byte, before a long payload
    b"*2\r\n$4\rxECHO\r\n$2000\rx" + b"z" * 2002,
    # more arguments announced than sent, the last one long
    b"*5\r\n$4\r\nECHO\r\n$2000\r\n" + b"z" * 2002,
]


@pytest.mark.parametrize("stream", HOSTILE)
def test_hostile_lengths_around_long_payloads(stream):
    """As Redis, fed byte by byte, whatever the reads."""
    expected = RedisModel(*DEFAULT_LIMITS).run(stream)
    for kw in ({}, {"chunk": 1}, {"chunk": 1500}, {"cuts": [len(stream) // 2]}, {"cuts": [20, 30]}):
        assert both(stream, **kw) == expected


def test_hostile_lengths_read_as_documented():
    assert run(HOSTILE[0]) == ([], None)
    assert run(HOSTILE[3]) == ([[b"ECHO", b"z" * 2000], [b"PING"]], None)
    assert run(HOSTILE[4]) == ([], b"Protocol error: invalid bulk length")
    assert run(HOSTILE[10]) == ([], b"Protocol error: expected '$', got ':'")


def test_a_payload_over_the_bulk_limit_is_refused():
    stream = b"*2\r\n$4\r\nECHO\r\n$2000\r\n" + b"z" * 2002
    assert both(stream, max_bulk_len=1999) == ([], b"Protocol error: invalid bulk length")
    assert both(stream, max_bulk_len=2000) == ([[b"ECHO", b"z" * 2000]], None)


def test_preauth_stops_at_a_long_payload_as_without_the_cut():
    big = b"z" * (codec.PREAUTH_MAX_BULK + 1)
    stream = mb(b"AUTH", b"pw") + mb(b"ECHO", big)
    for cut in (None, 10, 40, len(stream) - 5):
        results = []
        for generic in (False, True):
            mp = pytest.MonkeyPatch()
            if generic:
                mp.setattr(RequestParser, "_cut", lambda self, data, pos, out: -1)
            try:
                parser = RequestParser()
                parser.set_preauth(True)
                pieces = [stream] if cut is None else [stream[:cut], stream[cut:]]
                got = []
                for piece in pieces:
                    got += parser.feed_parse(piece)
                results.append((got, parser.preauth_refused))
                parser.set_preauth(False)
                results.append(parser.parse())
            finally:
                mp.undo()
        assert results[0:2] == results[2:4]
        assert results[0] == ([[b"AUTH", b"pw"]], b"Protocol error: unauthenticated bulk length")
        assert results[1] == [[b"ECHO", big]]


def test_the_pin_can_fail(monkeypatch):
    """A cut that takes one byte too few of a long payload disagrees with
    the generic path."""
    real = RequestParser._cut

    def short(self, data, pos, out):
        end = real(self, data, pos, out)
        if end > 0:
            out[-1][-1] = out[-1][-1][:-1]
        return end

    monkeypatch.setattr(RequestParser, "_cut", short)
    with pytest.raises(AssertionError):
        both(mb(b"ECHO", b"z" * 2000))


def test_a_long_payload_is_cut_not_scanned(monkeypatch):
    """Whole requests with long payloads never reach the split; a payload
    across reads never reaches _run: its start waits as a view, and it is
    made bytes once, when complete."""
    splits = []
    real_fast = RequestParser._fast

    def fast(self, lines, i, last, out):
        splits.append(sum(map(len, lines)))
        return real_fast(self, lines, i, last, out)

    monkeypatch.setattr(RequestParser, "_fast", fast)
    payload = body(4096)
    request = mb(b"ADDJOB", b"q", payload, b"0")
    parser = RequestParser()
    assert parser.feed_parse(request * 3) == [[b"ADDJOB", b"q", payload, b"0"]] * 3
    assert max(splits, default=0) < LONG

    big = body(200_000)
    stream = mb(b"ADDJOB", b"q", big, b"0")
    cost = Cost(monkeypatch)
    parser = RequestParser()
    out = parser.feed_parse(stream[:65536])
    assert out == [] and type(parser._chunks[0]) is memoryview
    for i in range(65536, len(stream), 65536):
        out += parser.feed_parse(stream[i:i + 65536])
    assert out == [[b"ADDJOB", b"q", big, b"0"]]
    # _run had the first read (the headers), then the bytes after the
    # payload: never the payload's later reads
    assert cost.run_bytes < 65536 + 200
    assert parser.pending() == 0 and parser.held() == 0


@st.composite
def long_stream(draw):
    """Requests of short and long arguments, canonical or with any 2 bytes
    after a payload: (bytes, argvs)."""
    reqs, out = [], b""
    for _ in range(draw(st.integers(1, 4))):
        args = []
        for _ in range(draw(st.integers(1, 6))):
            n = draw(st.sampled_from([0, 1, 5, LONG - 1, LONG, LONG + 3, 5000]))
            args.append((draw(st.binary(min_size=1, max_size=4)) * n)[:n])
        trailer = draw(st.sampled_from([b"\r\n", b"\r\n", b"xy"]))
        out += b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s%s" % (len(a), a, trailer) for a in args)
        reqs.append(args)
    return out, reqs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_stream(), st.data())
def test_property_long_payloads_split_anywhere(stream_reqs, data):
    stream, expected = stream_reqs
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    assert both(stream) == (expected, None)
    assert both(stream, cuts=cuts) == (expected, None)
    assert both(stream, chunk=997) == (expected, None)
