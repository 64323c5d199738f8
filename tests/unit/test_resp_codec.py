"""Tests for ``disque.resp.codec``: the client request parser.

* every case of the golden transcripts (/work/shared/reference/errors.md,
  captured from the original Disque server) is a test, fed whole and byte by
  byte;
* Redis quirks (string2ll, CR-only terminators, unchecked payload trailers,
  strchr stopping at NUL, sdssplitargs) and the size limits;
* the deferred-error contract, performance (pipelining, a 20 MB body fed in
  64 KB chunks, long lines fed byte by byte);
* hypothesis: split invariance, fuzzing, and equivalence with ``RedisModel``,
  a literal transliteration of Disque's networking.c fed one byte per read().
"""

import ast
import pathlib
import string
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from disque.resp import codec
from disque.resp.codec import ARG_OVERHEAD, ProtocolError, RequestParser


def drain(parser, data=None):
    """Call parse() until it returns [] or raises: (commands, error body).
    With ``data``, the first call is ``feed_parse(data)``, as the server
    makes it (its shortcut must agree with the general path)."""
    out = []
    try:
        while True:
            if data is not None:
                commands, data = parser.feed_parse(data), None
            else:
                commands = parser.parse()
            if not commands:
                return out, None
            out.extend(commands)
    except ProtocolError as e:
        return out, e.args[0]


def run(data, chunk=None, cuts=None, **limits):
    """Feed ``data`` whole, in ``chunk``-sized pieces or cut at ``cuts``,
    draining after every feed: (commands, error body)."""
    if cuts is None:
        step = chunk or max(1, len(data))
        cuts = range(step, len(data), step)
    bounds = [0, *sorted(cuts), len(data)]
    parser = RequestParser(**limits)
    out = []
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if n % 2:
            parser.feed(data[a:b])
            commands, error = drain(parser)
        else:
            commands, error = drain(parser, data[a:b])
        out.extend(commands)
        if error is not None:
            return out, error
    return out, None


def check(data, commands, error=None, **limits):
    """Same result fed whole and byte by byte (or 997-byte pieces if big)."""
    assert run(data, **limits) == (commands, error)
    chunk = 1 if len(data) < 5000 else 997
    assert run(data, chunk=chunk, **limits) == (commands, error)


# -- golden transcripts (errors.md) ------------------------------------------

# Sections "Unknown commands" and "Wrong arity": (command typed, bytes sent).
TRANSCRIPT_REQUESTS = [
    ("FOO", b"*1\r\n$3\r\nFOO\r\n"),
    ("FOO bar baz", b"*3\r\n$3\r\nFOO\r\n$3\r\nbar\r\n$3\r\nbaz\r\n"),
    ("GET x", b"*2\r\n$3\r\nGET\r\n$1\r\nx\r\n"),
    ("SET x y", b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\ny\r\n"),
    ("SELECT 0", b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n"),
    ("MULTI", b"*1\r\n$5\r\nMULTI\r\n"),
    ("''", b"*1\r\n$0\r\n\r\n"),
    ("x" * 200, b"*1\r\n$200\r\n" + b"x" * 200 + b"\r\n"),
    ("AUTH", b"*1\r\n$4\r\nAUTH\r\n"),
    ("DEBUG", b"*1\r\n$5\r\nDEBUG\r\n"),
    ("CONFIG", b"*1\r\n$6\r\nCONFIG\r\n"),
    ("CLUSTER", b"*1\r\n$7\r\nCLUSTER\r\n"),
    ("CLIENT", b"*1\r\n$6\r\nCLIENT\r\n"),
    ("SLOWLOG", b"*1\r\n$7\r\nSLOWLOG\r\n"),
    ("LATENCY", b"*1\r\n$7\r\nLATENCY\r\n"),
    ("ADDJOB", b"*1\r\n$6\r\nADDJOB\r\n"),
    ("GETJOB", b"*1\r\n$6\r\nGETJOB\r\n"),
    ("ACKJOB", b"*1\r\n$6\r\nACKJOB\r\n"),
    ("FASTACK", b"*1\r\n$7\r\nFASTACK\r\n"),
    ("DELJOB", b"*1\r\n$6\r\nDELJOB\r\n"),
    ("SHOW", b"*1\r\n$4\r\nSHOW\r\n"),
    ("LOADJOB", b"*1\r\n$7\r\nLOADJOB\r\n"),
    ("QLEN", b"*1\r\n$4\r\nQLEN\r\n"),
    ("QPEEK", b"*1\r\n$5\r\nQPEEK\r\n"),
    ("QSTAT", b"*1\r\n$5\r\nQSTAT\r\n"),
    ("ENQUEUE", b"*1\r\n$7\r\nENQUEUE\r\n"),
    ("NACK", b"*1\r\n$4\r\nNACK\r\n"),
    ("DEQUEUE", b"*1\r\n$7\r\nDEQUEUE\r\n"),
    ("WORKING", b"*1\r\n$7\r\nWORKING\r\n"),
    ("PAUSE", b"*1\r\n$5\r\nPAUSE\r\n"),
    ("PING a b", b"*3\r\n$4\r\nPING\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("TIME x", b"*2\r\n$4\r\nTIME\r\n$1\r\nx\r\n"),
    ("HELLO x", b"*2\r\n$5\r\nHELLO\r\n$1\r\nx\r\n"),
    ("QLEN a b", b"*3\r\n$4\r\nQLEN\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("QSTAT a b", b"*3\r\n$5\r\nQSTAT\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("QPEEK a 1 2", b"*4\r\n$5\r\nQPEEK\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\n2\r\n"),
    ("SHOW a b", b"*3\r\n$4\r\nSHOW\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("WORKING a b", b"*3\r\n$7\r\nWORKING\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("LOADJOB a b", b"*3\r\n$7\r\nLOADJOB\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("BGREWRITEAOF x", b"*2\r\n$12\r\nBGREWRITEAOF\r\n$1\r\nx\r\n"),
    ("AUTH a b", b"*3\r\n$4\r\nAUTH\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ("MONITOR x", b"*2\r\n$7\r\nMONITOR\r\n$1\r\nx\r\n"),
]


@pytest.mark.parametrize("typed, sent", TRANSCRIPT_REQUESTS, ids=lambda v: str(v)[:20])
def test_transcript_requests(typed, sent):
    argv = [b""] if typed == "''" else [a.encode() for a in typed.split()]
    check(sent, [argv])


# Section "Inline commands": (bytes sent, commands the server ran).
TRANSCRIPT_INLINE = [
    (b"PING\r\n", [[b"PING"]]),
    (b"PING\n", [[b"PING"]]),  # LF only
    (b"ping hello\r\n", [[b"ping", b"hello"]]),
    (b"QLEN inlineq\r\n", [[b"QLEN", b"inlineq"]]),
    (b'ADDJOB inlineq "hello world" 0\r\n', [[b"ADDJOB", b"inlineq", b"hello world", b"0"]]),
    (b"QPEEK inlineq 1\r\n", [[b"QPEEK", b"inlineq", b"1"]]),
    (b"ADDJOB inlineq 'single quoted' 0\r\n",
     [[b"ADDJOB", b"inlineq", b"single quoted", b"0"]]),
    (b'ADDJOB inlineq "esc\\x41\\n" 0\r\n', [[b"ADDJOB", b"inlineq", b"escA\n", b"0"]]),
    (b"QPEEK inlineq -2\r\n", [[b"QPEEK", b"inlineq", b"-2"]]),
    (b"   PING   \r\n", [[b"PING"]]),
    (b"\r\nPING\r\n", [[b"PING"]]),
    (b"PING\r\nPING\r\nTIME\r\n", [[b"PING"], [b"PING"], [b"TIME"]]),
    (b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nQLEN\r\n$1\r\nx\r\nPING\r\n",
     [[b"PING"], [b"QLEN", b"x"], [b"PING"]]),
    (b"FOO bar\r\n", [[b"FOO", b"bar"]]),
    (b"*0\r\nPING\r\n", [[b"PING"]]),
    (b"*-1\r\nPING\r\n", [[b"PING"]]),
    (b"*1\r\n$0\r\n\r\n", [[b""]]),
]


@pytest.mark.parametrize("sent, commands", TRANSCRIPT_INLINE, ids=repr)
def test_transcript_inline(sent, commands):
    check(sent, commands)


# Section "Protocol errors": (bytes sent, commands run, reply bytes); a None
# reply is "nothing more, connection open": the parser waits for more.
TRANSCRIPT_ERRORS = [
    (b"*2\r\n$3\r\nfoo\r\nxyz\r\n", [], b"-ERR Protocol error: expected '$', got 'x'\r\n"),
    (b"*2\r\n$4\r\nPING\r\n:1\r\n", [], b"-ERR Protocol error: expected '$', got ':'\r\n"),
    (b"*abc\r\n", [], b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1048577\r\n", [], b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1048576\r\n", [], None),
    (b"*1\r\n$abc\r\n", [], b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-1\r\n", [], b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$536870913\r\n", [], b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$10\r\nPING\r\n", [], None),
    (b"*1\r\n$4\r\nPINGxx\r\n", [[b"PING"]], None),
    (b'PING "abc\r\n', [], b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"PING 'abc\r\n", [], b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b'PING "a"b\r\n', [], b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"A" * 65546, [], b"-ERR Protocol error: too big inline request\r\n"),
    (b"*" + b"1" * 65546, [], b"-ERR Protocol error: too big mbulk count string\r\n"),
]


@pytest.mark.parametrize("sent, commands, reply", TRANSCRIPT_ERRORS, ids=lambda v: repr(v)[:30])
def test_transcript_errors(sent, commands, reply):
    error = reply[5:-2] if reply else None
    check(sent, commands, error)
    if reply is not None:  # the server's reply line, as protocol.py builds it
        assert b"-ERR " + error + b"\r\n" == reply


# -- API contract --------------------------------------------------------------

def test_protocol_error_carries_bytes():
    parser = RequestParser()
    parser.feed(b"*x\r\n")
    with pytest.raises(ProtocolError) as info:
        parser.parse()
    assert isinstance(info.value, Exception)
    assert info.value.args == (b"Protocol error: invalid multibulk length",)


def test_commands_before_an_error_come_first_then_error_is_sticky():
    parser = RequestParser()
    parser.feed(b"PING\r\n*2\r\n$4\r\nQLEN\r\n$1\r\nx\r\n*abc\r\nPING\r\n")
    assert parser.parse() == [[b"PING"], [b"QLEN", b"x"]]
    for _ in range(3):
        with pytest.raises(ProtocolError, match="invalid multibulk length"):
            parser.parse()
    parser.feed(b"PING\r\n")  # the stream is dead: dropped
    assert parser.pending() == 0
    with pytest.raises(ProtocolError):
        parser.parse()


def test_error_alone_is_raised_at_once():
    parser = RequestParser()
    parser.feed(b"*1\r\n$x\r\n")
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        parser.parse()


def test_error_in_a_later_feed_and_partial_request_dropped():
    parser = RequestParser()
    parser.feed(b"*1\r\n$4\r\nPING\r\n*2\r\n$1\r\na\r\n")
    assert parser.parse() == [[b"PING"]]
    assert parser.parse() == []
    parser.feed(b"?1\r\n")
    with pytest.raises(ProtocolError, match="expected '\\$', got '\\?'"):
        parser.parse()


def test_parse_returns_fresh_lists_and_empty_when_idle():
    parser = RequestParser()
    assert parser.parse() == []
    parser.feed(b"")
    assert parser.parse() == []
    parser.feed(b"*1\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n")
    first = parser.parse()
    assert first == [[b"a"], [b"b"]] and first[0] is not first[1]
    assert all(type(a) is bytes for cmd in first for a in cmd)


def test_pending_counts_unconsumed_bytes():
    parser = RequestParser()
    parser.feed(b"*1\r\n$4\r\nPI")
    assert parser.pending() == 10
    assert parser.parse() == []
    assert 0 < parser.pending() <= 10
    parser.feed(b"NG\r\n*1")
    assert parser.parse() == [[b"PING"]]
    assert parser.pending() == 2
    parser.feed(b"\r\n$0\r\n\r\n")
    assert parser.parse() == [[b""]]
    assert parser.pending() == 0


def test_feed_copies_mutable_buffers():
    data = bytearray(b"*1\r\n$4\r\nPING\r\n")
    parser = RequestParser()
    parser.feed(data)
    parser.feed(memoryview(b"PING\r\n"))
    data[8:12] = b"XXXX"
    assert parser.parse() == [[b"PING"], [b"PING"]]


def test_every_prefix_waits_and_completes():
    data = b"*4\r\n$6\r\nADDJOB\r\n$2\r\njq\r\n$5\r\nhello\r\n$1\r\n0\r\n"
    for i in range(len(data)):
        parser = RequestParser()
        parser.feed(data[:i])
        assert parser.parse() == []
        parser.feed(data[i:])
        assert parser.parse() == [[b"ADDJOB", b"jq", b"hello", b"0"]]


def test_codec_is_sans_io():
    """Only pure standard-library imports: no twisted, no sockets."""
    tree = ast.parse(pathlib.Path(codec.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"functools", "re", "sys"}  # sys: the runtime's name (codec._PYPY)


# -- Redis quirks --------------------------------------------------------------

@pytest.mark.parametrize("header", [
    b"*01", b"*+1", b"* 1", b"*1 ", b"*-0", b"*1_0", b"*", b"*-", b"*--1", b"*0x1",
    b"*1.0", b"*\xd9\xa1", b"*9223372036854775808", b"*-9223372036854775809",
    b"*" + b"9" * 5000,
])
def test_multibulk_count_is_string2ll_strict(header):
    check(header + b"\r\nPING\r\n", [], b"Protocol error: invalid multibulk length")


@pytest.mark.parametrize("header", [b"*0", b"*-1", b"*-5", b"*-9223372036854775808"])
def test_non_positive_counts_are_empty_requests(header):
    check(header + b"\r\nPING\r\n", [[b"PING"]])


@pytest.mark.parametrize("header", [
    b"$01", b"$+1", b"$ 1", b"$1 ", b"$-0", b"$1_0", b"$", b"$-", b"$-1", b"$-2",
    b"$9223372036854775808", b"$\xd9\xa1", b"$" + b"9" * 5000,
])
def test_bulk_length_is_string2ll_strict(header):
    check(b"*1\r\n" + header + b"\r\nx\r\n", [], b"Protocol error: invalid bulk length")


def test_limits_are_inclusive_and_configurable():
    check(b"*1\r\n$536870912\r\n", [])  # the largest bulk Redis accepts: waits
    check(b"*1\r\n$10\r\n0123456789\r\n", [[b"0123456789"]], max_bulk_len=10)
    check(b"*1\r\n$11\r\n", [], b"Protocol error: invalid bulk length", max_bulk_len=10)
    check(b"*3\r\n" + b"$1\r\na\r\n" * 3, [[b"a"] * 3], max_multibulk_len=3)
    check(b"*4\r\n", [], b"Protocol error: invalid multibulk length", max_multibulk_len=3)
    big = 20000  # beyond the fast-path tables
    check(b"*1\r\n$%d\r\n" % big + b"y" * big + b"\r\n", [[b"y" * big]])
    check(b"*%d\r\n" % big + b"$1\r\nz\r\n" * big, [[b"z"] * big])


def test_header_ends_at_cr_and_the_next_byte_is_skipped():
    check(b"*1\rX$4\rYPING\r\n", [[b"PING"]])
    check(b"*1\n$4\r\nPING\r\n", [], b"Protocol error: invalid multibulk length")
    check(b"*1\r\n$4\n\r\nPING\r\n", [], b"Protocol error: invalid bulk length")
    # Redis 3.x put the CR itself in the error line, which is then not valid
    # RESP (hiredis >= 2 refuses it); like Redis >= 4, a space stands for it.
    check(b"*1\r\n\r\n", [], b"Protocol error: expected '$', got ' '")


def test_header_cr_as_last_byte_waits_for_one_more():
    parser = RequestParser()
    for piece in (b"*1\r", b"\n$4\r", b"\nPING\r"):
        parser.feed(piece)
        assert parser.parse() == []
    parser.feed(b"\n")
    assert parser.parse() == [[b"PING"]]


def test_payload_trailer_is_skipped_unchecked():
    check(b"*1\r\n$4\r\nPINGab*1\r\n$4\r\nPING\r\n", [[b"PING"], [b"PING"]])
    check(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", [[b"a", b"b"]])
    check(b"*2\r\n$1\r\naXY$1\r\nbZW", [[b"a", b"b"]])
    check(b"*1\r\n$4\r\nPING", [])  # the 2 trailer bytes are awaited
    check(b"*1\r\n$4\r\nPING\r", [])
    check(b"*1\r\n$6\r\nPI\r\nNG\r\n", [[b"PI\r\nNG"]])  # CRLF inside a payload


def test_nul_hides_the_line_terminator_like_strchr():
    # Waits instead of failing on the content, until the line is too big.
    check(b"PI\0NG\r\n", [])
    check(b"PING\r\nPI\0NG\r\n", [[b"PING"]])
    check(b"PI\0NG\r\n" + b"A" * 57, [], max_inline_len=64)  # 64 bytes
    check(b"PI\0NG\r\n" + b"A" * 58, [], b"Protocol error: too big inline request",
          max_inline_len=64)
    check(b"*1\0\r\n", [])
    check(b"*1\0\r\n" + b"A" * 59, [], max_inline_len=64)
    check(b"*1\0\r\n" + b"A" * 60, [], b"Protocol error: too big mbulk count string",
          max_inline_len=64)
    check(b"*1\r\n$4\0\r\nPING\r\n", [])
    check(b"*1\r\n\0\r\n", [])  # no "expected '$'": the CR is never seen
    # The bulk header line starts after "*1\r\n": 3 + 61 = 64 bytes, then 65.
    check(b"*1\r\n\0\r\n" + b"A" * 61, [], max_inline_len=64)
    check(b"*1\r\n\0\r\n" + b"A" * 62, [], b"Protocol error: too big bulk count string",
          max_inline_len=64)
    # NUL in a payload or after a terminator is just data.
    check(b"*1\r\n$3\r\na\0b\r\nPING\r\n", [[b"a\0b"], [b"PING"]])


def test_too_big_boundaries():
    check(b"A" * 65536, [])
    check(b"A" * 65537, [], b"Protocol error: too big inline request")
    check(b"A" * 65536 + b"\n", [[b"A" * 65536]])
    # Byte by byte, Redis saw 65537 bytes without LF before this LF came.
    check(b"A" * 65536 + b"\r\n", [], b"Protocol error: too big inline request")
    check(b"*" + b"1" * 65535, [])
    check(b"*" + b"1" * 65536, [], b"Protocol error: too big mbulk count string")
    check(b"*" + b"1" * 65535 + b"\r\n", [], b"Protocol error: invalid multibulk length")
    check(b"*1\r\n$" + b"1" * 65535, [])
    check(b"*1\r\n$" + b"1" * 65536, [], b"Protocol error: too big bulk count string")
    check(b"*1\r\n$" + b"1" * 65535 + b"\r\n", [], b"Protocol error: invalid bulk length")


def test_too_big_is_measured_from_the_line_start():
    # A big payload before a slow header does not count (as in Redis, which
    # reads big payloads up to their exact end).
    body = b"p" * 70000
    data = b"*2\r\n$70000\r\n" + body + b"\r\n$3\r\nabc\r\n"
    check(data, [[body, b"abc"]])


INLINE_SPLIT = [
    (b'PING ""\r\n', [[b"PING"]]),  # empty arguments are dropped
    (b'"" PING\r\n', [[b"PING"]]),
    (b'""\r\n', []),
    (b"''  ''\r\n", []),
    (b'a"b c"\r\n', [[b"ab c"]]),  # a quote may open mid-token
    (b"a'b c' d\r\n", [[b"ab c", b"d"]]),
    (b'"\\xZZ"\r\n', [[b"xZZ"]]),
    (b'"\\x4"\r\n', [[b"x4"]]),
    (b'"\\x4a\\X41\\x0A"\r\n', [[b"JX41\n"]]),
    (b'"\\x00\\xff"\r\n', [[b"\x00\xff"]]),
    (b'"a\\"b"\r\n', [[b'a"b']]),
    (b"'a\\'b'\r\n", [[b"a'b"]]),
    (b"'a\\nb\\ c'\r\n", [[b"a\\nb\\ c"]]),  # only \' is an escape
    (b"'a\\\\''\r\n", [[b"a\\'"]]),
    (b'"\\n\\r\\t\\b\\a\\\\\\q\\\'"\r\n', [[b"\n\r\t\b\x07\\q'"]]),
    (b"a\tb\r\n", [[b"a", b"b"]]),
    (b"a\x0bb\r\n", [[b"a\x0bb"]]),  # \v, \f: blanks to skip, not separators
    (b"\x0b\x0ca \x0cb\x0c\r\n", [[b"a", b"b\x0c"]]),
    (b'"a"\tb\r\n', [[b"a", b"b"]]),
    (b'"a"\x0bb\r\n', [[b"a", b"b"]]),
    (b"'a'\x0c\r\n", [[b"a"]]),
    (b"PING\r\r\n", [[b"PING"]]),
    (b"a\rb\r\n", [[b"a", b"b"]]),
    (b'"a\rb"\r\n', [[b"a\rb"]]),
    (b'"a"\r\r\n', [[b"a"]]),
    (b'"\xff\x80 "\r\n', [[b"\xff\x80 "]]),
    (b"\xff \x80\r\n", [[b"\xff", b"\x80"]]),
    (b"\n", []),
    (b"\r\n", []),
    (b"\r\r\n", []),
    (b" \t \r\n", []),
    (b"PING\nPING\n", [[b"PING"], [b"PING"]]),  # see the module doc
    (b"PING\n*1\r\n$1\r\nx\r\n", [[b"PING"], [b"x"]]),
]


@pytest.mark.parametrize("sent, commands", INLINE_SPLIT, ids=repr)
def test_inline_splitting_like_sdssplitargs(sent, commands):
    check(sent, commands)


@pytest.mark.parametrize("sent", [
    b'"a\\"\r\n', b'"abc\\\r\n', b"'a'b\r\n", b"\"a\"'b'\r\n", b'a "b\r\n',
    b"'a\\'\r\n", b'"abc\r\r\n', b'x "a"b"\r\n', b"''x\r\n",
])
def test_inline_unbalanced_quotes(sent):
    check(sent, [], b"Protocol error: unbalanced quotes in request")


# -- cost: linear in the input, measured without a clock ----------------------
#
# Each test parses an input of size n and of size 2n and compares what the
# parser did, counted deterministically (the same on every run and runtime):
# the Python lines it ran, the bytes it handed to ``_run`` (each call is a
# join or a copy of the buffered input) and the longest list of lines it
# split at once.  A parser that re-scans or re-joins its buffer on every
# feed doubles its cost ratio to ~4; a linear one stays near 2.

ADDJOB = b"*4\r\n$6\r\nADDJOB\r\n$2\r\njq\r\n$5\r\nhello\r\n$1\r\n0\r\n"


class Cost:
    """What one ``run(...)`` made the parser do (see the section comment)."""

    def __init__(self, monkeypatch):
        self.lines = self.run_bytes = self.longest_split = 0
        self.slow_headers = 0
        run_, fast, header = RequestParser._run, RequestParser._fast, RequestParser._header

        def counted_run(parser, data, out, pos):
            self.run_bytes += len(data) - pos
            return run_(parser, data, out, pos)

        def counted_fast(parser, lines, i, last, out):
            self.longest_split = max(self.longest_split, len(lines))
            return fast(parser, lines, i, last, out)

        def counted_header(parser, *args):
            self.slow_headers += 1
            return header(parser, *args)

        monkeypatch.setattr(RequestParser, "_run", counted_run)
        monkeypatch.setattr(RequestParser, "_fast", counted_fast)
        monkeypatch.setattr(RequestParser, "_header", counted_header)

    def measure(self, data, **kw):
        """``run(data, **kw)`` while counting the codec's Python lines."""
        self.lines = self.run_bytes = self.longest_split = self.slow_headers = 0
        codec_file = codec.__file__

        def local(frame, event, arg):
            if event == "line":
                self.lines += 1
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code.co_filename == codec_file else None

        sys.settrace(tracer)
        try:
            result = run(data, **kw)
        finally:
            sys.settrace(None)
        return result, (self.lines, self.run_bytes)


def assert_linear(monkeypatch, make, expected, **kw):
    """Parsing ``make(2n)`` costs at most 2.2 x ``make(n)`` in lines run and
    in bytes handed to ``_run``; returns the Cost of the larger run."""
    cost = Cost(monkeypatch)
    (small, (lines1, bytes1)) = cost.measure(make(1), **kw)
    (big, (lines2, bytes2)) = cost.measure(make(2), **kw)
    assert small == expected(1) and big == expected(2)
    assert lines2 <= 2.2 * lines1, ("python lines grew", lines1, lines2)
    assert bytes2 <= 2.2 * bytes1, ("bytes handed to _run grew", bytes1, bytes2)
    return cost


def test_the_cost_check_can_fail(monkeypatch):
    """The meter sees a parser that re-scans its whole buffer on every feed
    (the classic quadratic mistake), planted by making it forget which
    chunks it already searched for the line terminator.  Results stay
    right; only the cost grows."""
    original_parse = RequestParser.parse

    def forgetful_parse(parser):
        parser._seen = 0
        return original_parse(parser)

    monkeypatch.setattr(RequestParser, "parse", forgetful_parse)
    with pytest.raises(AssertionError, match="python lines grew"):
        assert_linear(monkeypatch, lambda k: b"A" * 500 * k + b"\r\n",
                      lambda k: ([[b"A" * 500 * k]], None), chunk=1)


def test_pipelined_canonical_requests_take_the_fast_path(monkeypatch):
    cost = assert_linear(monkeypatch, lambda k: ADDJOB * 10_000 * k,
                         lambda k: ([[b"ADDJOB", b"jq", b"hello", b"0"]] * 10_000 * k, None),
                         chunk=65536)
    # Only a request cut by a chunk boundary takes the slow header path.
    chunks = len(ADDJOB * 20_000) // 65536 + 1
    assert cost.slow_headers <= 4 * chunks


def test_big_bulk_in_64k_chunks_is_linear(monkeypatch):
    body = bytes(range(256)) * (4 * 1024 * 1024 // 256)

    def make(k):
        return b"*2\r\n$3\r\nSET\r\n$%d\r\n" % (len(body) * k) + body * k + b"\r\nPING\r\n"

    cost = assert_linear(monkeypatch, make, lambda k: ([[b"SET", body * k], [b"PING"]], None),
                         chunk=65536)
    # The payload is joined once, when complete, not on every feed.
    assert cost.run_bytes <= 2 * len(make(2))


def test_big_body_full_of_crlf_at_once(monkeypatch):
    """A payload of CRLFs fed whole is never split into one list of
    millions of lines: the fast path works on bounded windows."""
    def make(k):
        body = b"\r\n" * (512 * 1024 * k)
        return b"*1\r\n$%d\r\n" % len(body) + body + b"\r\n" + ADDJOB * 10

    def expected(k):
        return [[b"\r\n" * (512 * 1024 * k)]] + [[b"ADDJOB", b"jq", b"hello", b"0"]] * 10, None

    cost = assert_linear(monkeypatch, make, expected)
    assert cost.longest_split <= codec._WINDOW // 2 + 1


def test_many_arguments_in_small_chunks_is_linear(monkeypatch):
    def make(k):
        return b"*%d\r\n" % (20_000 * k) + b"$1\r\nx\r\n" * (20_000 * k)

    assert_linear(monkeypatch, make, lambda k: ([[b"x"] * 20_000 * k], None), chunk=4096)


def test_long_line_fed_byte_by_byte_is_linear(monkeypatch):
    assert_linear(monkeypatch, lambda k: b"A" * 5000 * k + b"\r\n",
                  lambda k: ([[b"A" * 5000 * k]], None), chunk=1)
    assert_linear(monkeypatch, lambda k: b"*1\r\n$" + b"1" * 5000 * k,
                  lambda k: ([], None), chunk=1)


# -- a literal model of Disque's networking.c --------------------------------------

ULLONG_MAX = (1 << 64) - 1


def c_string2ll(s):
    """util.c string2ll(), line by line."""
    if len(s) == 0:
        return None
    if len(s) == 1 and s[0] == ord("0"):
        return 0
    p, negative = 0, False
    if s[0] == ord("-"):
        negative, p = True, 1
        if p == len(s):
            return None
    if ord("1") <= s[p] <= ord("9"):
        v = s[p] - 48
        p += 1
    else:
        return None
    while p < len(s) and ord("0") <= s[p] <= ord("9"):
        if v > ULLONG_MAX // 10:
            return None
        v *= 10
        if v > ULLONG_MAX - (s[p] - 48):
            return None
        v += s[p] - 48
        p += 1
    if p < len(s):
        return None
    if negative:
        return None if v > (1 << 63) else -v
    return None if v > (1 << 63) - 1 else v


def c_sdssplitargs(line):
    """sds.c sdssplitargs(), line by line, on a NUL-terminated C string."""
    def at(i):
        return line[i] if i < len(line) else 0

    def isspace(c):
        return c in b" \t\n\v\f\r"

    def ishex(c):
        return c != 0 and c in b"0123456789abcdefABCDEF"

    p, vector = 0, []
    while True:
        while at(p) and isspace(at(p)):
            p += 1
        if not at(p):
            return vector
        inq = insq = done = False
        current = b""
        while not done:
            if inq:
                if at(p) == 92 and at(p + 1) == ord("x") and ishex(at(p + 2)) and ishex(at(p + 3)):
                    current += bytes([int(bytes([at(p + 2), at(p + 3)]), 16)])
                    p += 3
                elif at(p) == 92 and at(p + 1):
                    p += 1
                    escapes = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
                    current += bytes([escapes.get(at(p), at(p))])
                elif at(p) == ord('"'):
                    if at(p + 1) and not isspace(at(p + 1)):
                        return None
                    done = True
                elif not at(p):
                    return None
                else:
                    current += bytes([at(p)])
            elif insq:
                if at(p) == 92 and at(p + 1) == ord("'"):
                    p += 1
                    current += b"'"
                elif at(p) == ord("'"):
                    if at(p + 1) and not isspace(at(p + 1)):
                        return None
                    done = True
                elif not at(p):
                    return None
                else:
                    current += bytes([at(p)])
            else:
                if at(p) in (32, 10, 13, 9, 0):
                    done = True
                elif at(p) == ord('"'):
                    inq = True
                elif at(p) == ord("'"):
                    insq = True
                else:
                    current += bytes([at(p)])
            if at(p):
                p += 1
        vector.append(current)


class RedisModel:
    """processInputBuffer() and friends from Disque's networking.c, line by
    line, with ``read()`` returning one byte at a time.  The constants keep
    Redis' proportions (PROTO_MBULK_BIG_ARG = PROTO_INLINE_MAX_SIZE / 2)."""

    def __init__(self, inline_max, mbulk_max, bulk_max):
        self.INLINE_MAX, self.BIG_ARG = inline_max, inline_max // 2
        self.MBULK_MAX, self.BULK_MAX = mbulk_max, bulk_max
        self.q = b""
        self.reqtype, self.multibulklen, self.bulklen, self.argv = 0, 0, -1, []
        self.commands, self.error = [], None

    def strchr(self, start, ch):
        for i in range(start, len(self.q)):
            if self.q[i] == ch:
                return i
            if self.q[i] == 0:
                return -1
        return -1

    def run(self, data):
        for i in range(len(data)):
            if self.error is not None:
                break
            self.q += data[i:i + 1]
            self.process_input_buffer()
        return self.commands, self.error

    def process_input_buffer(self):
        while self.q and self.error is None:
            if not self.reqtype:
                self.reqtype = "multibulk" if self.q[0] == ord("*") else "inline"
            if self.reqtype == "inline":
                if not self.process_inline_buffer():
                    break
            elif not self.process_multibulk_buffer():
                break
            if self.argv:
                self.commands.append(self.argv)
            self.reqtype, self.multibulklen, self.bulklen, self.argv = 0, 0, -1, []

    def fail(self, message):
        self.error = message
        return False

    def process_inline_buffer(self):
        newline = self.strchr(0, ord("\n"))
        if newline < 0:
            if len(self.q) > self.INLINE_MAX:
                return self.fail(b"Protocol error: too big inline request")
            return False
        if newline != 0 and self.q[newline - 1] == ord("\r"):
            newline -= 1
        querylen = newline
        argv = c_sdssplitargs(self.q[:querylen])
        if argv is None:
            return self.fail(b"Protocol error: unbalanced quotes in request")
        self.q = self.q[querylen + 2:]
        self.argv = [a for a in argv if a]
        return True

    def process_multibulk_buffer(self):
        pos = 0
        if self.multibulklen == 0:
            newline = self.strchr(0, ord("\r"))
            if newline < 0:
                if len(self.q) > self.INLINE_MAX:
                    return self.fail(b"Protocol error: too big mbulk count string")
                return False
            if newline > len(self.q) - 2:
                return False
            ll = c_string2ll(self.q[1:newline])
            if ll is None or ll > self.MBULK_MAX:
                return self.fail(b"Protocol error: invalid multibulk length")
            pos = newline + 2
            if ll <= 0:
                self.q = self.q[pos:]
                return True
            self.multibulklen = ll
        while self.multibulklen:
            if self.bulklen == -1:
                newline = self.strchr(pos, ord("\r"))
                if newline < 0:
                    if len(self.q) > self.INLINE_MAX:
                        return self.fail(b"Protocol error: too big bulk count string")
                    break
                if newline > len(self.q) - 2:
                    break
                if self.q[pos] != ord("$"):
                    c = self.q[pos]  # a CR or LF shows as a space (valid RESP, as Redis >= 4)
                    return self.fail(b"Protocol error: expected '$', got '%c'" % (32 if c in (10, 13) else c))
                ll = c_string2ll(self.q[pos + 1:newline])
                if ll is None or ll < 0 or ll > self.BULK_MAX:
                    return self.fail(b"Protocol error: invalid bulk length")
                pos = newline + 2
                if ll >= self.BIG_ARG:
                    self.q, pos = self.q[pos:], 0
                self.bulklen = ll
            if len(self.q) - pos < self.bulklen + 2:
                break
            if pos == 0 and self.bulklen >= self.BIG_ARG and len(self.q) == self.bulklen + 2:
                self.argv.append(self.q[:self.bulklen])
                self.q = b""
            else:
                self.argv.append(self.q[pos:pos + self.bulklen])
                pos += self.bulklen + 2
            self.bulklen = -1
            self.multibulklen -= 1
        if pos:
            self.q = self.q[pos:]
        return self.multibulklen == 0


def test_model_agrees_with_golden_transcripts():
    for sent, commands, reply in TRANSCRIPT_ERRORS:
        if len(sent) < 1000:
            model = RedisModel(64 * 1024, 1024 * 1024, 512 * 1024 * 1024)
            assert model.run(sent) == (commands, reply[5:-2] if reply else None)
    for sent, commands in TRANSCRIPT_INLINE + INLINE_SPLIT:
        model = RedisModel(64 * 1024, 1024 * 1024, 512 * 1024 * 1024)
        assert model.run(sent) == (commands, None)


# -- hypothesis ------------------------------------------------------------------------

SMALL = dict(max_inline_len=16, max_multibulk_len=8, max_bulk_len=40)
PLAIN = string.ascii_letters + string.digits
PRINTABLE = bytes(c for c in range(32, 127) if c not in b'"\\')


def quote_double(arg):
    return b'"' + b"".join(
        bytes([c]) if c in PRINTABLE else b"\\x%02x" % c for c in arg) + b'"'


@st.composite
def request(draw, max_arg=12):
    """One request: (bytes, argv or None for an empty request)."""
    kind = draw(st.sampled_from(["resp", "resp", "quirky", "plain", "quoted", "empty"]))
    if kind == "empty":
        return draw(st.sampled_from(
            [b"*0\r\n", b"*-1\r\n", b"*-7\r\n", b"\r\n", b"\n", b" \t \r\n", b'"" \'\'\n'])), None
    if kind in ("resp", "quirky"):
        args = draw(st.lists(st.binary(max_size=max_arg), min_size=1, max_size=5))
        any2 = st.binary(min_size=2, max_size=2)
        if kind == "resp":
            crlf = trailer = lambda: b"\r\n"  # noqa: E731
        else:  # CR + any byte ends a header; any 2 bytes follow a payload
            crlf = lambda: b"\r" + draw(st.binary(min_size=1, max_size=1))  # noqa: E731
            trailer = lambda: draw(any2)  # noqa: E731
        out = b"*%d" % len(args) + crlf()
        for a in args:
            out += b"$%d" % len(a) + crlf() + a + trailer()
        return out, args
    if kind == "plain":
        args = draw(st.lists(st.text(PLAIN, min_size=1, max_size=6), min_size=1, max_size=4))
        args = [a.encode() for a in args]
        seps = draw(st.lists(st.sampled_from([b" ", b"\t", b"  ", b" \x0b"]),
                             min_size=len(args), max_size=len(args)))
        line = b"".join(s + a for s, a in zip(seps, args))
    else:
        args = draw(st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=4))
        words = []
        for a in args:
            if b"'" in a or b"\\" in a or b"\n" in a or b"\0" in a or draw(st.booleans()):
                words.append(quote_double(a))
            else:
                words.append(b"'" + a + b"'")
        line = b" ".join(words)
    return line + draw(st.sampled_from([b"\r\n", b"\n", b" \r\n"])), args


@st.composite
def valid_stream(draw, max_arg=12):
    reqs = draw(st.lists(request(max_arg), max_size=8))
    return b"".join(r for r, _ in reqs), [a for _, a in reqs if a is not None]


@st.composite
def cuts_for(draw, data):
    return draw(st.lists(st.integers(0, len(data)), max_size=12))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_property_valid_stream_split_anywhere(data):
    stream, expected = data.draw(valid_stream())
    cuts = data.draw(cuts_for(stream))
    assert run(stream) == (expected, None)
    assert run(stream, cuts=cuts) == (expected, None)
    assert run(stream, chunk=1) == (expected, None)


FRAGMENT = st.one_of(
    st.sampled_from([
        b"*", b"$", b"-", b"0", b"1", b"2", b"3", b"8", b"9", b"10", b"40", b"41",
        b"\r", b"\n", b"\r\n", b"\r\n\r\n", b" ", b"\t", b'"', b"'", b"\\", b"x",
        b"4f", b"A", b"PING", b"\0", b"\x0b", b"+", b"*1\r\n", b"*2\r\n", b"$1\r\n",
        b"$3\r\n", b"abc", b"A" * 9,
    ]),
    st.binary(max_size=4),
    request(max_arg=45).map(lambda r: r[0]),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAGMENT, max_size=30).map(b"".join), st.data())
def test_property_matches_redis_fed_byte_by_byte(stream, data):
    model = RedisModel(SMALL["max_inline_len"], SMALL["max_multibulk_len"], SMALL["max_bulk_len"])
    expected = model.run(stream)
    assert run(stream, **SMALL) == expected
    assert run(stream, cuts=data.draw(cuts_for(stream)), **SMALL) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(FRAGMENT, max_size=40).map(b"".join))
def test_property_matches_redis_with_default_limits(stream):
    expected = RedisModel(64 * 1024, 1024 * 1024, 512 * 1024 * 1024).run(stream)
    assert run(stream) == expected


@settings(max_examples=500, deadline=2000)
@given(st.binary(max_size=300), st.data())
def test_property_fuzz_never_crashes_and_is_split_invariant(stream, data):
    for limits in ({}, SMALL):
        parser = RequestParser(**limits)
        parser.feed(stream)
        try:
            for _ in range(len(stream) + 2):  # progress or stop: never spins
                commands = parser.parse()
                assert isinstance(commands, list)
                for argv in commands:
                    assert isinstance(argv, list) and argv
                    assert all(type(a) is bytes for a in argv)
                if not commands:
                    break
        except ProtocolError as e:
            assert type(e.args[0]) is bytes and e.args[0].startswith(b"Protocol error: ")
        whole = run(stream, **limits)
        assert run(stream, cuts=data.draw(cuts_for(stream)), **limits) == whole


# -- what the parser holds (client-query-buffer-limit) --

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
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        p.parse()
    assert p.held() == 0 and p.pending() == 0


# -- before AUTH: Redis' limits for clients that have not authenticated --------

def mb(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def preauth_run(data, chunk):
    """Feed ``data`` in ``chunk``-byte pieces to a parser under the pre-AUTH
    limits: (commands, what it refused or None)."""
    parser = RequestParser()
    parser.set_preauth(True)
    out = []
    for i in range(0, len(data), chunk):
        out.extend(drain(parser, data[i:i + chunk])[0])
    return out, parser.preauth_refused, parser


@pytest.mark.parametrize("chunk", [1, 7, 10 ** 6])
@pytest.mark.parametrize("data, refused", [
    (mb(*[b"a"] * 10), None),
    (mb(*[b"a"] * 11), b"Protocol error: unauthenticated multibulk length"),
    (mb(b"AUTH", b"x" * 16384), None),
    (mb(b"AUTH", b"x" * 16385), b"Protocol error: unauthenticated bulk length"),
    (b"*1\r\n$100000000\r\n", b"Protocol error: unauthenticated bulk length"),
])
def test_preauth_limits_stop_at_the_header(data, refused, chunk):
    commands, got, _ = preauth_run(data, chunk)
    assert got == refused
    assert (commands == []) == (refused is not None)


def test_preauth_limits_come_after_the_general_checks():
    parser = RequestParser()
    parser.set_preauth(True)
    assert drain(parser, b"*1\r\n$-3\r\n") == ([], b"Protocol error: invalid bulk length")
    parser = RequestParser()
    parser.set_preauth(True)
    assert drain(parser, b"*2000000\r\n") == ([], b"Protocol error: invalid multibulk length")


@pytest.mark.parametrize("chunk", [1, 5, 10 ** 6])
@pytest.mark.parametrize("big", [mb(*[b"a"] * 12), mb(b"ADDJOB", b"q", b"x" * 20000, b"0")])
def test_lifting_the_limits_resumes_at_the_stopped_header(big, chunk):
    """AUTH pipelined with a big request: the requests before the stop come
    out, and once the caller lifts the limits the big one follows intact."""
    data = mb(b"AUTH", b"pw") + big + mb(b"PING")
    commands, refused, parser = preauth_run(data, chunk)
    assert commands == [[b"AUTH", b"pw"]] and refused is not None
    assert parser.parse() == []  # stopped: nothing until lifted
    parser.set_preauth(False)
    assert parser.preauth_refused is None
    rest = drain(parser)[0]
    assert rest == drain(RequestParser(), big + mb(b"PING"))[0]


def test_preauth_counts_what_it_holds():
    parser = RequestParser()
    parser.set_preauth(True)
    drain(parser, mb(b"AUTH", b"pw") + b"*2\r\n$3\r\nabc\r\n$99999\r\n" + b"x" * 1000)
    assert parser.preauth_refused is not None
    assert parser.held() == len(b"$99999\r\n") + 1000 + 3 + ARG_OVERHEAD
