"""Sans-IO parser for client requests (RESP2 multibulk and inline).

It reproduces ``processInputBuffer`` of Disque's networking.c (Redis 3.x)
byte for byte: the same argv, the same error texts, the same quirks:

* a header line ends at the first ``\\r``; the byte after it is skipped
  unread, as are the 2 bytes after a payload (``$4\\r\\nPINGxx`` is PING);
* numbers follow ``string2ll``: only ``-`` as sign, no spaces, no leading 0;
* ``strchr`` stops at NUL: a NUL before a line's terminator hides it, so
  the request waits until it is too big, then fails;
* inline lines are split by ``sdssplitargs``; empty arguments are dropped.

One deliberate difference: the byte named in "expected '$', got '<c>'" is
a space when it is a CR or LF, as Redis >= 4 does (Redis 3.x wrote it raw:
an error line with a CR or LF inside is not valid RESP).

Redis applies the "too big" limits to whatever its ``read()`` calls brought,
and after a bare ``\\n`` inline line skips one more byte if one is buffered.
Here every input gives what Redis gives when each byte arrives alone: the
only choice independent of how the stream is split, so feeding it whole or
byte by byte yields the same commands and error.  With the default limits
this differs from Redis only in those read-timing cases (pipelined
``PING\\nPING\\n`` gives two PINGs here; Redis reads ``ING`` second).

Before AUTH (``requirepass`` set, the client not authenticated yet) the
limits are those of Redis 6.2.6+/7 for such clients: a multibulk of more
than 10 arguments or a bulk longer than 16384 bytes is refused with
``Protocol error: unauthenticated multibulk length`` / ``... bulk length``
(:meth:`RequestParser.set_preauth`).  As Redis checks them request by
request, the parser stops at such a header instead of failing: the
requests before it are returned, and the caller, having run them, either
lifts the limits (an AUTH among them succeeded) and parses on from that
very header, or answers :attr:`RequestParser.preauth_refused`.

Speed: canonical multibulk requests (what client libraries send) are cut out
of a ``split(b"\\r\\n")`` window and checked by dict lookups, at C speed; the
rest uses bytes.find and slicing, with a per-byte loop only for quoted
inline arguments.  While a big payload or a long line is incomplete, parse()
costs O(new bytes): a 20 MB body fed in 64 KB chunks is linear.  A request
with a long payload (1 KB or more among its first arguments) is cut out by
its lengths, never split or scanned (:meth:`RequestParser._cut`), and a
payload across reads is copied once, when complete
(:meth:`RequestParser._payload`): a 4 KB ADDJOB parses in 2.0 us on
CPython and 0.8 us on PyPy (4.4 and 5.7 us split), a 64 KB one over two
reads in 7.2 and 7.7 us (62 and 118 us joined, sliced and split); one
parser fed the same request by ``feed_parse`` 2,000 times, best of 60.

Measured on the dev box (2 cores, CPython 3.11.7): 100,000 pipelined
``ADDJOB jq hello 0`` requests (4.4 MB) parsed by one call::

    p = RequestParser()
    p.feed(b"*4\\r\\n$6\\r\\nADDJOB\\r\\n$2\\r\\njq\\r\\n$5\\r\\nhello\\r\\n$1\\r\\n0\\r\\n"
           * 100_000)
    timeit.timeit(p.parse, number=1)  # 0.17 s: ~590,000 requests/s

Fed in 64 KB chunks, as Twisted delivers them: ~670,000/s.  The same
requests inline: ~820,000/s; as non-canonical multibulk (slow path only,
e.g. payloads not followed by CRLF): ~300,000/s.

This module stays over 400 lines on purpose: it is one parser.  The fast
path, the cut of long payloads, the slow path and the pre-AUTH stop work on
the same buffer, offset and pending-length state, and the fast paths hand a
request over to the slow one mid-way; kept in one class they share that state without a call
per request, which the figures above depend on (the inline splitting,
``_sdssplitargs``, is the one helper beside it).
Requests are written by :mod:`disque.resp.command`, replies by
:mod:`disque.resp.reply`.
"""

import functools
import re
import sys

__all__ = ["ProtocolError", "RequestParser"]


class ProtocolError(Exception):
    """A malformed request.  ``args[0]`` is the error line body as bytes,
    e.g. ``b"Protocol error: invalid multibulk length"``; the server replies
    ``b"-ERR " + args[0] + b"\\r\\n"`` and closes the connection."""


_BAD_MBULK = b"Protocol error: invalid multibulk length"
_BAD_BULK = b"Protocol error: invalid bulk length"
_BIG_MBULK = b"Protocol error: too big mbulk count string"
_BIG_BULK = b"Protocol error: too big bulk count string"
_BIG_INLINE = b"Protocol error: too big inline request"
_QUOTES = b"Protocol error: unbalanced quotes in request"
_UNAUTH_MBULK = b"Protocol error: unauthenticated multibulk length"
_UNAUTH_BULK = b"Protocol error: unauthenticated bulk length"
#: Redis' limits for a client that has not authenticated yet.
PREAUTH_MAX_MULTIBULK = 10
PREAUTH_MAX_BULK = 16384
#: _need while stopped at a header refused before AUTH: parse() waits.
_STOPPED = 1 << 62

#: Bytes split at a time by the fast path: bounds the list of lines a
#: payload full of CRLFs could create, and stays cache friendly.
_WINDOW = 128 * 1024
#: A request announcing a payload this long (or a header the tables do not
#: know) is cut out by its lengths, never split at CRLFs: a split reads
#: every byte of a payload (bytes.split and find of two bytes compare byte
#: by byte: ~2 ns a byte, 7 us for a 4 KB body), where the lengths jump
#: over it.  Below it the split of a whole window costs less than the
#: slow path's Python per argument.
_LONG_PAYLOAD = 1024
#: The start of a payload still incomplete at the end of a read is kept as
#: a view of the read from this length on (not copied: see _payload).
_VIEW_MIN = 4096
#: How many arguments of a request _cut reads looking for a long payload
#: (ADDJOB's body is the third): a request of many short arguments (ACKJOB
#: of 100 IDs) costs it at most these headers before the split.
_LONG_LOOK = 4
_PYPY = sys.implementation.name == "pypy"
_ISSPACE = frozenset(b" \t\n\r\x0b\x0c")  # C isspace(), C locale
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
#: A line without these splits exactly like ``bytes.split()``.
_NEEDS_SDSSPLIT = re.compile(rb"[\"'\x0b\x0c]").search
#: What an argument held by the parser costs besides its bytes (the bytes
#: object's header and its slot in the argument list), for :meth:`held`.
ARG_OVERHEAD = 40


def _string2ll(s):
    """Redis ``string2ll``: the value of ``s`` if it is exactly a canonical
    signed 64-bit decimal, else None."""
    if len(s) > 20:  # also keeps int() clear of its 4300-digit limit
        return None
    if s.isdigit():  # ASCII 0-9 only, non-empty
        v = int(s) if s[0] != 48 or len(s) == 1 else None
    elif s[:1] == b"-" and s[1:].isdigit() and s[1] != 48:
        v = -int(s[1:])
    else:
        return None
    return v if v is not None and -(1 << 63) <= v < (1 << 63) else None


@functools.lru_cache(maxsize=None)
def _header_table(prefix, max_value, max_line):
    """``{b"$0": 0, b"$1": 1, ...}``: header lines valid exactly as they are.

    One lookup of a line both parses it and checks everything Redis checks
    (``string2ll``, the value limit, the line-length limit); a miss ("$+1",
    "$01", "$-1", too big) just means: take the exact slow path.
    """
    keys = (prefix + b"%d" % i for i in range(max_value + 1))
    return {k: int(k[1:]) for k in keys if len(k) <= max_line}


def _sdssplitargs(line):
    """Port of ``sdssplitargs()``.  ``line`` holds no NUL (``strchr`` would
    have stopped there), so its end plays the C terminator.  Raises on an
    unterminated quote or a closing quote followed by a non-space."""
    n = len(line)
    args = []
    p = 0
    while True:
        while p < n and line[p] in _ISSPACE:
            p += 1
        if p >= n:
            return args
        cur = bytearray()
        quote = 0  # the open quote: 34 ("), 39 (') or none
        while True:
            c = line[p] if p < n else 0
            if quote and c == 92 and p + 1 < n and (quote == 34 or line[p + 1] == 39):
                if (quote == 34 and p + 3 < n and line[p + 1] == 120
                        and line[p + 2] in _HEX and line[p + 3] in _HEX):
                    cur.append(int(line[p + 2:p + 4], 16))  # "\xHH"
                    p += 3
                else:  # "\n" and co, "\<any>", or '\''
                    p += 1
                    cur.append(_ESCAPES.get(line[p], line[p]) if quote == 34 else 39)
            elif quote and (c == quote or p >= n):
                if p >= n or p + 1 < n and line[p + 1] not in _ISSPACE:
                    raise ProtocolError(_QUOTES)
                p += 1
                break
            elif not quote and (p >= n or c in b" \n\r\t"):
                p += 1
                break
            elif not quote and c in b"\"'":
                quote = c
            else:
                cur.append(c)
            p += 1
        args.append(bytes(cur))


class RequestParser:
    """Incremental request parser for one client connection.

    Invariants between calls:

    * ``_chunks`` joined are the ``_len`` unparsed bytes.  They start at a
      request or, inside a multibulk request whose first arguments are in
      ``_argv`` (``_left`` more to come), at the next bulk header, or at its
      payload when ``_bulklen >= 0``.  Each chunk is ``bytes``, except the
      first while ``_bulklen >= 0``: a ``memoryview`` of a read (the start
      of a long payload, see :meth:`_payload`).
    * parse() cannot progress before ``_len >= _need``; when ``_term`` is set
      it also waits for that byte in a chunk from index ``_seen`` on, or for
      the line to outgrow ``max_inline_len``.  So waiting for a big payload
      or a long line costs O(new bytes), not O(buffer).
    * ``_error`` set: the stream is dead, parse() raises a copy of it on
      every call (the kept one never carries a traceback: no reference
      cycle through this parser, see :mod:`disque.node.heap`).
    * ``_argv_bytes`` is what the first ``_argv_counted`` arguments of an
      incomplete ``_argv`` hold (bytes plus ``ARG_OVERHEAD`` each), 0 when
      no request is incomplete: :meth:`held` is O(1).
    * ``preauth_refused`` set (only with :meth:`set_preauth` on): the
      unparsed bytes start at the header that broke a pre-AUTH limit, and
      parse() returns nothing until :meth:`set_preauth` lifts the limits.
    """

    def __init__(self, max_bulk_len=512 * 1024 * 1024,
                 max_multibulk_len=1024 * 1024, max_inline_len=64 * 1024):
        self._max_mbulk = max_multibulk_len
        self._max_inline = max_inline_len
        self._max_bulk = max_bulk_len
        self.preauth = False
        self._tables()
        self._chunks, self._len, self._need, self._term, self._seen = [], 0, 1, None, 0
        self._argv, self._left, self._bulklen = None, 0, -1
        self._argv_bytes = self._argv_counted = 0
        self._error = None
        self.preauth_refused = None

    def set_max_bulk_len(self, max_bulk_len):
        """Refuse bulks longer than ``max_bulk_len`` from now on (Redis'
        ``proto-max-bulk-len``, which CONFIG SET changes for every client).
        A payload already announced is still awaited."""
        self._max_bulk = max_bulk_len
        self._tables()

    def set_preauth(self, on: bool):
        """Apply the pre-AUTH limits (see the module docstring) or lift
        them; lifting them resumes parsing at a header they stopped."""
        self.preauth = on
        self._tables()
        if not on and self.preauth_refused is not None:
            self.preauth_refused = None
            self._need = 1

    def _tables(self):
        """The fast path's header tables: no hit beyond a limit."""
        bulk, count = min(9999, self._max_bulk), min(9999, self._max_mbulk)
        if self.preauth:
            bulk, count = min(bulk, PREAUTH_MAX_BULK), min(count, PREAUTH_MAX_MULTIBULK)
        self._bulks = _header_table(b"$", bulk, self._max_inline).get
        self._counts = _header_table(b"*", count, self._max_inline).get

    def feed(self, data):
        """Buffer ``data`` (parsed by the next parse()).  Data fed after a
        protocol error is dropped, as Redis stops reading."""
        if data and self._error is None:
            self._chunks.append(data if type(data) is bytes else bytes(data))
            self._len += len(data)

    def failed(self) -> bool:
        """True when a protocol error is waiting to be raised by parse()."""
        return self._error is not None

    def pending(self):
        """Number of buffered bytes not yet consumed (Redis' ``qbuf``)."""
        return self._len

    def held(self):
        """What this parser holds for requests not complete yet: the
        unparsed bytes, plus the arguments of a multibulk request read so
        far (each its bytes plus ``ARG_OVERHEAD``).  This is what
        ``client-query-buffer-limit`` bounds: a request of many big
        arguments grows it even though each argument leaves the buffer."""
        return self._len + self._argv_bytes

    def peek(self, n):
        """The first ``n`` unparsed bytes (for a log line)."""
        head = b""
        for chunk in self._chunks:
            head += bytes(chunk[:n - len(head)])
            if len(head) >= n:
                break
        return head

    def feed_parse(self, data):
        """``feed(data)`` then ``parse()``, with a shortcut for the common
        case of a client sending whole canonical requests while nothing is
        buffered: one ``split`` and the table checks of :meth:`_fast`, no
        buffering.  Anything else takes the general path unchanged, and so
        does data longer than a window (one read of a socket is 64 KB at
        most; a bigger string could be a payload full of CRLFs, split here
        into millions of lines).  A request with a long payload is cut
        out by its lengths instead (:meth:`_cut`, see ``_LONG_PAYLOAD``)."""
        if not self._chunks and data[:1] == b"*" and data[-2:] == b"\r\n" \
                and len(data) <= _WINDOW and self._left == 0 and self._error is None and type(data) is bytes:
            out = []
            end = self._cut(data, 0, out) if len(data) >= _LONG_PAYLOAD else 0
            if end == len(data):
                return out
            if not end:
                lines = data.split(b"\r\n")
                last = len(lines) - 1
                if self._fast(lines, 0, last, out) == last:
                    return out
        self.feed(data)
        return self.parse()

    def parse(self):
        """Return every complete command now buffered, in order, each a list
        of bytes arguments (argv); keep any incomplete tail for the next
        feed().  Empty requests (blank inline line, ``*0``, ``*-1``) give
        nothing.

        On the first malformed request, the commands completed before it are
        returned and the ProtocolError is remembered and raised by the *next*
        call; with no such commands it is raised at once.  So parse() never
        returns ``[]`` while an error is pending: calling it until it returns
        ``[]`` or raises yields every good command, then the error.  Once
        raised, the same error is raised by every later call.
        """
        if self._error is not None:
            raise ProtocolError(*self._error.args)  # a copy: see below
        if self._len < self._need:
            return []
        chunks = self._chunks
        if self._term is not None and self._len <= self._max_inline:
            if not any(self._term in c for c in chunks[self._seen:]):
                self._seen = len(chunks)
                return []
        self._need, self._term = 1, None
        out = []
        try:
            if self._bulklen >= 0:  # the payload we waited for: _need says it is here
                data, pos = self._payload(out)
            else:
                data, pos = chunks[0] if len(chunks) == 1 else b"".join(chunks), 0
            pos = self._run(data, out, pos)
        except ProtocolError as e:
            # Kept without a traceback: ``e``'s frames hold this parser,
            # and a parser -> error -> traceback -> parser cycle outlives
            # the connection where the node freezes the heap (disque.node.heap).
            self._error = ProtocolError(*e.args)
            self._chunks, self._len, self._argv, self._left = [], 0, None, 0
            self._argv_bytes = self._argv_counted = 0
            if out:
                return out
            raise
        if self._bulklen >= 0 and len(data) - pos >= _VIEW_MIN:
            tail = memoryview(data)[pos:]  # a long payload's start, copied once when complete
        else:
            tail = data[pos:]
        self._chunks = [tail] if tail else []
        self._len = len(tail)
        self._seen = len(self._chunks)
        return out

    def _run(self, data, out, pos):
        """Append the complete commands of ``data`` from ``pos`` on to
        ``out``; save the partial-request state and return where the
        unparsed tail starts.  ``data`` starts at a header, never inside a
        payload (:meth:`_payload` cuts those out)."""
        n = len(data)
        n1, n2 = n - 1, n - 2
        find = data.find
        bulk_len, count_of = self._bulks, self._counts
        argv, left, bulklen = self._argv, self._left, -1
        # A window of data split at CRLF, for _fast; lines[li] starts at loff
        # and lines[last] is the window's unterminated end, never consumed.
        lines, li, loff, last = (), 0, pos, 0
        while True:
            while left:  # the bulks of the current multibulk request
                cr = find(b"\r", pos)
                ln = bulk_len(data[pos:cr]) if cr >= 0 else None
                if ln is None:
                    r = self._header(data, pos, n, True)
                    if r is None:
                        break
                    ln, cr = r
                start = cr + 2
                end = start + ln
                if end > n2:
                    if start > n:  # the header's CR is the last byte
                        self._need = n - pos + 1
                    else:
                        pos, bulklen, self._need = start, ln, ln + 2
                    break
                argv.append(data[start:end])
                pos = end + 2  # the 2 bytes after a payload are not checked
                left -= 1
                if not left:
                    out.append(argv)
            if left or pos >= n:
                break
            if data[pos] == 42:  # '*': a multibulk request
                while loff < pos and li < last:  # resync after the slow path
                    loff += len(lines[li]) + 2
                    li += 1
                if li >= last:  # window used up: split the next one, unless a long payload comes first
                    end = self._cut(data, pos, out) if n - pos >= _LONG_PAYLOAD else 0
                    if end > 0:
                        pos = end
                        continue
                    lines = (b"",) if end else data[pos:pos + _WINDOW].split(b"\r\n")
                    li, loff, last = 0, pos, len(lines) - 1
                if loff == pos:
                    i = self._fast(lines, li, last, out)
                    if i > li:
                        pos = loff = loff + sum(map(len, lines[li:i])) + 2 * (i - li)
                        li = i
                        continue
                cr = find(b"\r", pos)
                count = count_of(data[pos:cr]) if 0 <= cr < n1 else None
                if count is None:
                    r = self._header(data, pos, n, False)
                    if r is None:
                        break
                    count, cr = r
                pos = cr + 2
                if count > 0:
                    left, argv = count, []
            else:
                nl = self._line_end(data, pos, n, b"\n", _BIG_INLINE)
                if nl < 0:
                    break
                line = data[pos:nl - 1 if nl > pos and data[nl - 1] == 13 else nl]
                pos = nl + 1
                if _NEEDS_SDSSPLIT(line) is None:
                    args = line.split()
                else:
                    args = [a for a in _sdssplitargs(line) if a]
                if args:
                    out.append(args)
        if left:  # an incomplete request: count its new arguments only
            counted = self._argv_counted if argv is self._argv else 0
            if counted < len(argv):
                new = argv[counted:]
                self._argv_bytes = (self._argv_bytes if counted else 0) + sum(map(len, new)) \
                    + ARG_OVERHEAD * len(new)
                self._argv_counted = len(argv)
            elif not counted:
                self._argv_bytes = self._argv_counted = 0
        else:
            self._argv_bytes = self._argv_counted = 0
        self._argv, self._left, self._bulklen = argv, left, bulklen
        return pos

    def _cut(self, data, pos, out):
        """Take the request at ``pos`` (a ``*``) if one of its first
        ``_LONG_LOOK`` payloads is long, cut out by its lengths, never
        scanned (see ``_LONG_PAYLOAD``): its end once appended to ``out``;
        0 when they are short (the caller splits a window instead, ``out``
        unchanged); -1 when the request is incomplete or has a header the
        tables do not know before that is settled (the slow path takes it).
        It takes a request only where every header is a table hit, so
        exactly as the slow path would."""
        find, bulks = data.find, self._bulks
        n2 = len(data) - 2
        cr = find(b"\r", pos)
        count = self._counts(data[pos:cr]) if 0 <= cr <= n2 else None
        if count is None:
            return -1
        pos = cr + 2
        argv = []
        long = False
        for i in range(count):
            if i == _LONG_LOOK and not long:
                return 0
            cr = find(b"\r", pos)
            ln = bulks(data[pos:cr]) if cr >= 0 else None
            if ln is None:
                return -1
            start = cr + 2
            pos = start + ln
            if pos > n2:
                return -1
            if ln >= _LONG_PAYLOAD:
                long = True
            argv.append(data[start:pos])
            pos += 2  # the 2 bytes after a payload are not checked
        if not long:
            return 0
        out.append(argv)
        return pos

    def _payload(self, out):
        """Cut the awaited payload (``_bulklen`` bytes, with the 2 after it
        buffered too: ``_need``) out of ``_chunks`` with one copy, add it to
        the request (to ``out`` if that completes it) and return what
        follows it: (bytes, offset of the first byte after the 2).  The
        chunks are views or bytes: CPython's join reads views in place;
        PyPy's join copies each view first, while its JIT copies the sum
        of two parts made bytes once."""
        size = self._bulklen
        chunks = self._chunks
        parts = []
        i = off = 0
        while size:
            chunk = chunks[i]
            if len(chunk) > size:
                parts.append(chunk[:size] if type(chunk) is bytes and size < _VIEW_MIN else memoryview(chunk)[:size])
                off, size = size, 0
            else:
                parts.append(chunk)
                size -= len(chunk)
                i += 1
        if len(parts) == 1:
            payload = parts[0] if type(parts[0]) is bytes else bytes(parts[0])
        elif _PYPY and len(parts) == 2:
            payload = bytes(parts[0]) + bytes(parts[1])
        else:
            payload = b"".join(parts)
        off += 2  # the 2 bytes after a payload are not checked
        while off >= len(chunks[i]):
            off -= len(chunks[i])
            i += 1
            if i == len(chunks):
                break
        rest = chunks[i:]
        if not rest:
            data, off = b"", 0
        elif len(rest) == 1:
            data = rest[0] if type(rest[0]) is bytes else bytes(rest[0])
        else:
            data, off = b"".join([memoryview(rest[0])[off:], *rest[1:]]), 0
        argv = self._argv
        argv.append(payload)
        self._bulklen, self._left = -1, self._left - 1
        if not self._left:
            out.append(argv)
        return data, off

    def _fast(self, lines, i, last, out):
        """Consume canonical requests from ``lines[i]`` on; return the index
        of the first line not consumed.  A request is taken only if every
        header is a table hit and each payload line is exactly as long as
        declared and CRLF-terminated (index < ``last``): then Redis would
        cut it the very same way.  Anything else is left to the slow path."""
        counts, bulks, append = self._counts, self._bulks, out.append
        while i < last:
            count = counts(lines[i])
            if count is None:
                break
            j = i + 1 + 2 * count
            if j > last:
                break
            k = i + 1
            while k < j:  # (a loop, no temporary lists: faster than map on both runtimes)
                if bulks(lines[k]) != len(lines[k + 1]):
                    break
                k += 2
            if k < j:
                break
            if count:
                append(lines[i + 2:j:2])
            i = j
        return i

    # -- slow paths: Redis' exact order of checks; None/-1 means "wait" ----

    def _line_end(self, data, pos, n, term, too_big):
        """Where ``strchr`` finds the ``term`` ending the line at ``pos``;
        -1, with a wait hint, if not usable yet.  Raises ``too_big`` when
        Redis, reading byte by byte, would see more than ``max_inline_len``
        bytes without finding it."""
        limit = self._max_inline
        end = data.find(term, pos)
        nul = data.find(b"\0", pos, n if end < 0 else end) >= 0
        if end < 0 or end - pos > limit or nul:
            if n - pos > limit:
                raise ProtocolError(too_big)
            if nul:  # strchr() never gets past it: only the size can change
                self._need = limit + 1
            else:
                self._term = term
            return -1
        if term == b"\r" and end + 1 >= n:  # Redis wants a byte after the CR
            self._need = n - pos + 1
            return -1
        return end

    def _header(self, data, pos, n, bulk):
        """The ``$<len>`` (``bulk``) or ``*<count>`` line at ``pos``:
        (value, index of its CR), or None to wait."""
        cr = self._line_end(data, pos, n, b"\r", _BIG_BULK if bulk else _BIG_MBULK)
        if cr < 0:
            return None
        if bulk and data[pos] != 36:
            c = data[pos]  # CR or LF would end the error line early: a space, as Redis >= 4
            raise ProtocolError(b"Protocol error: expected '$', got '%c'" % (32 if c in b"\r\n" else c))
        v = _string2ll(data[pos + 1:cr])
        if bulk and (v is None or not 0 <= v <= self._max_bulk):
            raise ProtocolError(_BAD_BULK)
        if not bulk and (v is None or v > self._max_mbulk):
            raise ProtocolError(_BAD_MBULK)
        if self.preauth and v > (PREAUTH_MAX_BULK if bulk else PREAUTH_MAX_MULTIBULK):
            self.preauth_refused = _UNAUTH_BULK if bulk else _UNAUTH_MBULK
            self._need = _STOPPED  # stop here, _run saves the state: see set_preauth
            return None
        return v, cr
