"""Deterministic generators of hostile client requests and bus frames.

Imported by ``tools/fuzz.py`` (the long runs) and ``tests/test_fuzz_*.py``
(the short ones).  Everything is drawn from one ``random.Random``: the same
seed gives the same inputs, byte for byte, on CPython and PyPy.

:class:`RespGen` yields ``(category, data, expected)`` where ``data`` is
what a client writes and ``expected`` is the exact list of argv the
request parser must return for it (``None`` when the generator does not
predict the outcome: the parser must then return commands and/or raise
``ProtocolError``, and give the same result however the bytes are split).

:class:`BusGen` yields ``(category, frame, expected)`` where ``frame`` is
one bus frame without its length prefix and ``expected`` the
``(Header, message)`` that ``wire.decode`` must return, ``None`` when the
frame is built to be invalid (decode must raise ``WireError``), or
:data:`ANY` when it may decode or not (bit flips).

Commands are drawn from the Disque command set *minus* the ones that act
on the whole node (SHUTDOWN, DEBUG, CONFIG SET/REWRITE, CLIENT KILL/PAUSE,
CLUSTER MEET/FORGET/RESET/LEAVING, MONITOR, BGREWRITEAOF), and queue names
from :data:`FUZZ_QUEUES`, so the live fuzzer can run next to a "victim"
client whose jobs must come out untouched: nothing the fuzzer sends names
the victim's queue or jobs, which is the property under test (a request
must not affect anything it does not name).
"""

import binascii
import itertools
import random
import struct

from disque.bus import wire
from disque.core import catalog, messages, options
from disque.core.job import MAX_JOB_COUNTER
from disque.core.limits import MAX_JOB_SECONDS
from disque.resp.command import encode_command

__all__ = ["ANY", "BusGen", "FUZZ_QUEUES", "RespGen", "encode_command"]

ANY = object()

FUZZ_QUEUES = [b"fuzz:%d" % i for i in range(8)] + [b"", b"fuzz \"q\"", b"fuzz\r\nq", b"\x00\xff"]

_WORDY = bytes(b"abcxyz019 _-:"[i % 13] for i in range(256))  # bytes.translate table: random -> wordy


def _hex(rng, n):
    """``n`` (even) random lowercase hex digits."""
    return rng.randbytes(n // 2).hex().encode()


def _b64(rng, nbytes):
    return binascii.b2a_base64(rng.randbytes(nbytes), newline=False)


class _Values:
    """Random field values, plausible and hostile, for both generators."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def blob(self, maxlen=32) -> bytes:
        rng = self.rng
        r = rng.random()
        n = rng.randint(0, maxlen)
        if r < 0.4:
            return rng.randbytes(n).translate(_WORDY)
        if r < 0.8:
            return rng.randbytes(n)
        return rng.choice([b"", b"\r\n", b"\x00", b"\"", b"'", b"\\", b"$-1", b"*3", b"\xff" * n, b" " * n])

    def integer(self) -> int:
        rng = self.rng
        return rng.choice([
            0, 1, -1, 2, rng.randint(-10, 100), rng.randint(0, 1 << 16), (1 << 31) - 1, 1 << 31, (1 << 32) - 1,
            1 << 32, (1 << 63) - 1, -(1 << 63), rng.randint(-(1 << 63), (1 << 63) - 1)])

    def number_arg(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.75:
            return b"%d" % self.integer()
        return rng.choice([b"", b"-", b"+1", b"01", b"1e3", b"0x10", b" 1", b"1.5", b"9" * 30, b"-0",
                           b"18446744073709551616", b"-9223372036854775809", b"nan", b"inf"])

    def job_id(self) -> bytes:
        """Never an ID the node made: the random part is drawn here."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return b"D-" + _hex(rng, 8) + b"-" + _b64(rng, 18) + b"-" + b"%04x" % rng.randint(0, 0xFFFF)
        if r < 0.7:
            return b"D-" + rng.randbytes(38)
        return self.blob(48)

    def node_id(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return _hex(rng, 40)
        if r < 0.6:
            return b"0" * 40
        if r < 0.7:
            return _hex(rng, 40).upper()
        return rng.randbytes(40)

    def queue(self) -> bytes:
        return self.rng.choice(FUZZ_QUEUES)


class _Generator:
    """``next()`` picks a category by ``WEIGHTS`` and returns what its
    ``_<category>`` method makes: ``(category, bytes, expected)``."""

    CATEGORIES = ()
    WEIGHTS = ()

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.v = _Values(self.rng)
        self._makers = [getattr(self, "_" + c) for c in self.CATEGORIES]
        self._cum = list(itertools.accumulate(self.WEIGHTS))
        self._total = self._cum[-1]

    def next(self):
        x = self.rng.random() * self._total
        for i, c in enumerate(self._cum):
            if x < c:
                return self._makers[i]()
        return self._makers[-1]()


# -- client requests -----------------------------------------------------------

_INFO_SECTIONS = [b"server", b"clients", b"memory", b"jobs", b"queues", b"stats", b"all", b"default", b"bogus"]


class RespGen(_Generator):
    """Client requests: see the module docstring.  ``big`` caps the size of
    the oversized inputs (lines past the 64 KB inline limit by default)."""

    CATEGORIES = ("valid", "inline", "pipeline", "truncated", "oversized", "malformed", "garbage",
                  "quotes", "mutated")
    WEIGHTS = (30, 10, 10, 10, 6, 14, 8, 6, 6)

    def __init__(self, seed, big=70 * 1024):
        super().__init__(seed)
        self.big = big

    # -- commands ------------------------------------------------------------

    def command(self):
        """argv of a random command of the (safe) Disque command set."""
        rng, v = self.rng, self.v
        kind = rng.randint(0, 20)
        num = v.number_arg
        if kind <= 3:
            argv = [b"ADDJOB", v.queue(), v.blob(64), num()]
            for _ in range(rng.randint(0, 4)):
                opt = rng.choice([b"REPLICATE", b"DELAY", b"RETRY", b"TTL", b"MAXLEN", b"ASYNC", b"DEDUP", b"bogus"])
                argv.append(opt)
                if opt not in (b"ASYNC", b"bogus"):
                    argv.append(v.blob(12) if opt == b"DEDUP" else num())
            return argv
        if kind <= 5:
            argv = [b"GETJOB"]
            if rng.random() < 0.9:
                argv.append(b"NOHANG")
            else:
                argv += [b"TIMEOUT", rng.choice([b"1", b"10", b"50"])]
            for opt in rng.sample([b"COUNT", b"WITHCOUNTERS", b"bogus"], rng.randint(0, 2)):
                argv.append(opt)
                if opt == b"COUNT":
                    argv.append(num())
            argv.append(b"FROM")
            argv += [v.queue() for _ in range(rng.randint(0, 3))]
            return argv
        if kind <= 8:
            name = rng.choice([b"ACKJOB", b"FASTACK", b"DELJOB", b"ENQUEUE", b"DEQUEUE", b"NACK", b"WORKING",
                               b"SHOW", b"LOADJOB"])
            return [name] + [v.job_id() for _ in range(rng.randint(0, 3))]
        if kind <= 11:
            name = rng.choice([b"QLEN", b"QPEEK", b"QSTAT", b"PAUSE", b"QSCAN", b"JSCAN"])
            if name == b"QPEEK":
                return [name, v.queue(), num()]
            if name == b"PAUSE":
                return [name, v.queue()] + rng.sample([b"in", b"out", b"all", b"none", b"state", b"bcast", b"x"],
                                                      rng.randint(0, 3))
            if name == b"QSCAN":
                return [name] + rng.choice([[], [b"COUNT", num()], [b"BUSYLOOP"], [b"MINLEN", num()],
                                            [b"IMPORTRATE", num()], [num()]])
            if name == b"JSCAN":
                return [name] + rng.choice([[], [num()], [b"0", b"COUNT", num()], [b"0", b"QUEUE", v.queue()],
                                            [b"0", b"STATE", v.blob(8)], [b"0", b"REPLY", rng.choice([b"all", b"id", b"x"])],
                                            [b"BUSYLOOP", b"QUEUE", v.queue()]])
            return [name, v.queue()]
        if kind <= 16:
            return rng.choice([
                [b"PING"], [b"PING", v.blob(16)], [b"TIME"], [b"HELLO"], [b"INFO"], [b"INFO", rng.choice(_INFO_SECTIONS)],
                [b"COMMAND"], [b"COMMAND", b"COUNT"], [b"COMMAND", b"INFO", v.blob(8)], [b"CONFIG", b"GET", v.blob(10)],
                [b"CLIENT", b"LIST"], [b"CLIENT", b"GETNAME"], [b"CLIENT", b"SETNAME", v.blob(10)],
                [b"CLIENT", b"REPLY", rng.choice([b"ON", b"OFF", b"SKIP", b"x"])], [b"AUTH", v.blob(8)],
                [b"SLOWLOG", rng.choice([b"GET", b"LEN", b"RESET", b"x"])], [b"LATENCY", rng.choice([b"LATEST", b"x"])],
                [b"CLUSTER", rng.choice([b"INFO", b"NODES", b"MYID", b"x"])], [b"PING", b"a", b"b", b"c"],
            ])
        # unknown commands, wrong arities, binary names
        return [v.blob(12) or b"x"] + [v.blob(16) for _ in range(rng.randint(0, 4))]

    def _valid(self):
        argv = self.command()
        return "valid", encode_command(argv), [argv]

    def _inline(self):
        """A command as an inline line, each argument quoted if needed."""
        rng = self.rng
        argv = self.command()
        parts = []
        for a in argv:
            plain = a and all(33 <= c < 127 and c not in b"\"'\\" for c in a)
            if plain and rng.random() < 0.8:
                parts.append(a)
            elif rng.random() < 0.5 or b"'" in a or a.endswith(b"\\") or any(c < 32 or c > 126 for c in a):
                parts.append(b'"' + b"".join(b"\\x%02x" % c if not 32 <= c < 127 or c in b"\"\\" else bytes([c])
                                              for c in a) + b'"')
            else:
                parts.append(b"'" + a + b"'")
        sep = rng.choice([b" ", b"  ", b"\t", b" \t "])
        line = sep.join(parts) + rng.choice([b"\r\n", b"\n"])
        args = [a for a in argv if a]  # the parser drops empty arguments
        expected = [args] if args else []
        if line[:1] == b"*":  # a multibulk header, not an inline line
            expected = None
        return "inline", line, expected

    def _pipeline(self):
        rng = self.rng
        parts, expected = [], []
        for _ in range(rng.randint(2, 12)):
            cat, data, exp = (self._valid() if rng.random() < 0.7 else self._inline())
            parts.append(data)
            if expected is not None and exp is not None:
                expected += exp
            else:
                expected = None
        if rng.random() < 0.3:  # a bad request in the middle or at the end
            parts.insert(rng.randint(0, len(parts)), self.next()[1])
            expected = None
        return "pipeline", b"".join(parts), expected

    def _truncated(self):
        data = self.rng.choice([self._valid, self._inline])()[1]
        return "truncated", data[:self.rng.randint(0, len(data) - 1)], None

    def _oversized(self):
        rng = self.rng
        r = rng.randint(0, 9)
        if r == 0:  # an inline line past the limit
            return "oversized", b"PING " + b"a" * rng.randint(self.big - 100, self.big), None
        if r == 1:  # a header line past the limit, no CR
            return "oversized", b"*" + b"1" * rng.randint(self.big - 100, self.big), None
        if r == 2:
            return "oversized", b"*1\r\n$" + b"9" * rng.randint(self.big - 100, self.big), None
        big = rng.choice([b"1048577", b"2147483648", b"4294967296", b"9223372036854775807", b"9223372036854775808",
                          b"18446744073709551616", b"536870913", b"99999999999999999999999999"])
        if r <= 5:
            return "oversized", b"*" + big + b"\r\n$4\r\nPING\r\n", None
        if r <= 7:
            return "oversized", b"*2\r\n$4\r\nPING\r\n$" + big + b"\r\nabc\r\n", None
        # a legal but large declared payload, never sent in full
        return "oversized", b"*2\r\n$4\r\nPING\r\n$%d\r\n" % rng.randint(1 << 20, 512 << 20) + b"x" * 100, None

    def _malformed(self):
        rng = self.rng
        bad = rng.choice([
            b"*abc\r\n", b"*-5\r\n$4\r\nPING\r\n", b"*01\r\n$4\r\nPING\r\n", b"*+1\r\n$4\r\nPING\r\n",
            b"*1\r\n:4\r\nPING\r\n", b"*1\r\n$-1\r\n", b"*1\r\n$abc\r\nPING\r\n", b"*1\r\n$ 4\r\nPING\r\n",
            b"*1\r\n$4\r\nPING", b"*1\r\n$04\r\nPING\r\n", b"*1\n$4\nPING\n", b"*1\r$4\rPING\r",
            b"*\r\n", b"$4\r\nPING\r\n", b"*1\r\n*1\r\n$4\r\nPING\r\n", b"*1\x00\r\n$4\r\nPING\r\n",
            b"*2\r\n$4\r\nPING\r\n", b"*1\r\n$4\r\nPINGxx", b"*-1\r\n", b"*0\r\n", b"*1\r\n$0\r\n\r\n",
            b"*1\r\n$-0\r\n", b"*1\r\n$4\r\nPING\r\n\r\n\r\n", b"*1\r\n$\r\n", b"*1\r\n$4\r\n" + b"\x00" * 6,
            b"*3\r\n$3\r\nSET\r\n", b"\r\n", b"\n", b" \r\n", b"*1 \r\n$4\r\nPING\r\n",
        ])
        if rng.random() < 0.5:  # a random header number
            bad = rng.choice([b"*", b"*1\r\n$"]) + self.v.number_arg() + rng.choice([b"\r\n", b"\r", b"\n", b""]) \
                + rng.choice([b"", b"PING\r\n", b"$4\r\nPING\r\n"])
        return "malformed", bad, None

    def _garbage(self):
        rng = self.rng
        n = rng.choice([1, 2, 8, 64, 512, 4096])
        data = rng.randbytes(rng.randint(1, n))
        if rng.random() < 0.3:
            data = rng.choice([b"*", b"$", b"*2\r\n", b"\"", b"PING "]) + data
        return "garbage", data, None

    def _quotes(self):
        rng = self.rng
        line = rng.choice([
            b'PING "abc', b"PING 'abc", b'PING "abc"def', b"PING 'a'b", b'PING "\\x4', b'PING "\\xZZ"',
            b'"', b"'", b'PING "a\\"', b"PING 'a\\'", b'PING """"', b"PING ''''", b'PING "\\', b'ECHO "\\x41"x',
            b'PING "a" "b" "', b'PING "\x00"', b'"PING"', b"'PING'", b'PING "\\n\\r\\t\\b\\a\\z"',
        ])
        return "quotes", line + rng.choice([b"\r\n", b"\n", b""]), None

    def _mutated(self):
        rng = self.rng
        data = bytearray(self._valid()[1])
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            op = rng.randint(0, 2)
            if op == 0:
                data[i] = rng.randint(0, 255)
            elif op == 1:
                del data[i]
            else:
                data[i:i] = rng.choice([b"\r\n", b"\r", b"\n", b"\x00", b"*", b"$", b"-", b"9"])
        return "mutated", bytes(data), None


# -- bus frames ----------------------------------------------------------------

_HEADER = struct.Struct(">2sBB40sHHB")


def _job_in_range(j):
    return (0 <= j.delay <= MAX_JOB_SECONDS and 0 <= j.retry <= MAX_JOB_SECONDS
            and 0 <= j.nacks <= MAX_JOB_COUNTER and 0 <= j.deliv <= MAX_JOB_COUNTER
            and _options_valid(j.opts))


def _options_valid(opts):
    try:
        options.decode(options.encode(opts), 0)
    except options.BadOptions:
        return False
    return True


class BusGen(_Generator):
    """Bus frames: see the module docstring.  ``senders``, when given, is
    the list of node IDs valid frames come from (the live fuzzer's own);
    otherwise any ID, hostile ones included."""

    CATEGORIES = ("valid", "hostile", "truncated", "version", "type", "magic", "trailing", "garbage", "flipped")
    WEIGHTS = (20, 30, 12, 6, 6, 4, 4, 8, 10)

    def __init__(self, seed, senders=None, live=False):
        super().__init__(seed)
        # Live, every address a frame gives must lead nowhere: a loopback
        # one could be another node running on the machine, which our node
        # would then link to, or even join.  TEST-NET-1 (RFC 5737) instead.
        self.host = b"192.0.2.1" if live else b"127.0.0.1"
        # (an empty host means "the connection's address": loopback, live)
        self.hostile_hosts = [self.host, b"\xff\xfe", b"a" * 255, b"256.1.1.1", b"host name\n", b"a" * 64 + b".b"]
        self.hostile_hosts += [b"192.0.2.2", b"192.0.2.3"] if live else [b"", b"localhost", b"::1", None]
        self.senders = senders
        self._types = [cls for _, cls in messages.TYPES]
        self._codes = {code for code, _ in messages.TYPES}

    # -- messages ------------------------------------------------------------

    def header(self, hostile=False):
        rng, v = self.rng, self.v
        if self.senders is not None:
            sender = rng.choice(self.senders)
        else:
            sender = v.node_id()
        if hostile:
            host = rng.choice(self.hostile_hosts)
            if host is None:
                host = v.blob(255)
            port = rng.choice([0, 1, 65535, 55536, 55535, rng.randint(0, 65535)])
            flags = rng.choice([0, 1, 0xFFFF, rng.randint(0, 0xFFFF)])
        else:
            host, port, flags = self.host, rng.randint(1, 55535), rng.choice([0, 0, 0, 1])
        return messages.Header(sender, host, port, flags)

    def _uint(self, bits, hostile):
        rng = self.rng
        top = (1 << bits) - 1
        if hostile:
            return rng.choice([0, 1, top, top - 1, rng.randint(0, top)])
        return rng.randint(0, min(top, 100))

    def _i64(self, hostile):
        rng = self.rng
        if hostile:
            return rng.choice([0, -1, 1, (1 << 63) - 1, -(1 << 63), rng.randint(-(1 << 63), (1 << 63) - 1),
                               1 << 53, -(1 << 53), 1_795_347_500_000, 1_795_347_500_000 + 86_400_000_000])
        return rng.randint(0, 1 << 40)

    def _str(self, hostile):
        rng = self.rng
        if hostile and rng.random() < 0.1:
            return rng.choice([b"", b"q" * rng.randint(1000, 70000), rng.randbytes(rng.randint(0, 300))])
        return self.v.queue() if rng.random() < 0.7 else self.v.blob(40)

    def _ids(self, hostile):
        rng, v = self.rng, self.v
        n = rng.randint(0, 3) if not hostile or rng.random() < 0.9 else rng.randint(0, 200)
        return tuple(v.node_id() for _ in range(n))

    def job(self, hostile):
        rng, v = self.rng, self.v
        return messages.JobRecord(
            v.job_id() if hostile else b"D-" + _hex(rng, 8) + b"-" + _b64(rng, 18) + b"-%04x" % rng.randint(0, 0xFFFF),
            self._str(hostile), self._str(hostile), self._uint(16, hostile),
            self._i64(hostile), self._i64(hostile), self._i64(hostile), self._i64(hostile), self._i64(hostile),
            self._i64(hostile), self._ids(hostile), v.blob(20) if rng.random() < 0.3 else b"",
            self.options(hostile) if rng.random() < 0.3 else None)

    def options(self, hostile):
        """Job options (bus version 3); hostile ones may break the invariants
        disque.core.options.decode checks."""
        rng = self.rng
        backoff = rng.randint(0, 5000) if hostile else rng.choice([0, rng.randint(1, 5000)])
        backoff_max = rng.randint(0, 10000) if hostile else (backoff and backoff + rng.randint(0, 5000))
        dead = rng.random() < 0.3
        return options.make(rng.randint(0, 12) if hostile else rng.randint(1, 9), backoff, backoff_max,
                            self._uint(32, hostile), self._str(hostile) if rng.random() < 0.3 else b"",
                            self._str(hostile) if dead else b"", b"max-deliveries" if dead or hostile else b"")

    def message(self, hostile=False):
        rng, v = self.rng, self.v
        cls = rng.choice(self._types)
        if cls in (messages.Meet, messages.Ping, messages.Pong):
            n = rng.randint(0, 4) if not hostile or rng.random() < 0.8 else rng.randint(0, wire.MAX_GOSSIP)
            entries = [messages.Gossip(v.node_id(), self.header(hostile).host, self._uint(16, hostile),
                                       self._uint(8, hostile)) for _ in range(min(n, 8))]
            return cls(tuple(entries[i % 8] for i in range(n)))  # a long list repeats its first 8
        if cls is messages.ReplJob:
            return cls(self.job(hostile))
        if cls is messages.YourJobs:
            return cls(tuple(self.job(hostile) for _ in range(rng.randint(0, 4))))
        if cls is messages.ReplJobs:
            return cls(tuple(self.job(hostile) for _ in range(rng.randint(0, 4))))
        if cls is messages.GotJobs:
            return cls(tuple(v.job_id() if hostile else self.job(False).id for _ in range(rng.randint(0, 4))))
        if cls is messages.Queued:
            return cls(v.job_id() if hostile else self.job(False).id, rng.randint(0, messages.COUNT_NACK))
        if cls is messages.SetAck:
            return cls(v.job_id(), self._uint(32, hostile))
        if cls is messages.GotAck:
            return cls(v.job_id(), rng.random() < 0.5)
        if cls is messages.DelJob:
            return cls(v.job_id(), rng.random() < 0.5)
        if cls is messages.NeedJobs:
            return cls(self._str(hostile), self._uint(32, hostile))
        if cls is messages.Pause:
            return cls(self._str(hostile), self._uint(8, hostile))
        if cls is messages.Fail:
            return cls(v.node_id())
        if cls is messages.NackDelay:
            return cls(v.job_id() if hostile else self.job(False).id, self._uint(63, hostile), rng.random() < 0.5)
        if cls is messages.CountsAsk:
            return cls(self._uint(32, hostile), self._uint(32, hostile), self._str(hostile), rng.random() < 0.5,
                       tuple(self._str(hostile) for _ in range(rng.randint(0, 3))))
        if cls is messages.Counts:
            rows = tuple(messages.QueueCount(self._str(hostile), *(self._uint(64, hostile) for _ in range(7)),
                                             self._uint(8, hostile)) for _ in range(rng.randint(0, 3)))
            return cls(self._uint(32, hostile), self._uint(64, hostile), self._uint(64, hostile),
                       self._uint(32, hostile), self._uint(32, hostile), rows, self._uint(16, hostile),
                       rng.random() < 0.5, self.header(hostile).host)
        if cls is messages.Settings:
            kinds = (b"schedule", b"limit", b"fired")
            entries = tuple(catalog.Entry(self._str(hostile) if hostile else rng.choice(kinds), self._str(hostile),
                                          self._uint(64, hostile), v.node_id(), self._str(hostile))
                            for _ in range(rng.randint(0, 3)))
            return cls(entries, rng.randint(0, 3 if hostile else 2))
        if cls is messages.SettingsSum:
            return cls(bytes(rng.getrandbits(8) for _ in range(20)))
        if cls is messages.QDemand:
            return cls(tuple(messages.QueueDemand(self._str(hostile), self._uint(32, hostile), self._uint(32, hostile))
                             for _ in range(rng.randint(0, 3))))
        return cls(v.job_id() if hostile else self.job(False).id)  # GotJob, Enqueue, WillQueue, Working

    def _frame(self, hostile):
        while True:
            header, msg = self.header(hostile), self.message(hostile)
            try:
                return header, msg, wire.encode(header, msg)
            except wire.WireError:
                continue  # e.g. a job ID not 40 bytes: the wire cannot carry it

    def _valid(self):
        header, msg, frame = self._frame(False)
        return "valid", frame, (header, msg)

    def _hostile(self):
        header, msg, frame = self._frame(True)
        jobs = (msg.job,) if type(msg) is messages.ReplJob else \
            msg.jobs if type(msg) in (messages.YourJobs, messages.ReplJobs) else ()
        if not all(_job_in_range(j) for j in jobs):
            return "hostile", frame, None  # decode refuses what ADDJOB would not make
        return "hostile", frame, (header, msg)

    def _truncated(self):
        frame = self._frame(self.rng.random() < 0.5)[2]
        return "truncated", frame[:self.rng.randrange(len(frame))], None

    def _version(self):
        frame = bytearray(self._frame(False)[2])
        frame[2] = self.rng.choice([0, wire.VERSION + 1, 255, self.rng.randint(wire.VERSION + 1, 255)])
        return "version", bytes(frame), None

    def _type(self):
        frame = bytearray(self._frame(False)[2])
        while frame[3] in self._codes:
            frame[3] = self.rng.randint(0, 255)
        return "type", bytes(frame), None

    def _magic(self):
        frame = bytearray(self._frame(False)[2])
        frame[self.rng.randint(0, 1)] ^= 1 << self.rng.randint(0, 7)
        return "magic", bytes(frame), None

    def _trailing(self):
        frame = self._frame(False)[2]
        return "trailing", frame + self.rng.randbytes(self.rng.randint(1, 64)), None

    def _garbage(self):
        rng = self.rng
        data = rng.randbytes(rng.choice([0, 1, 10, 49, 50, 51, 100, 1000]))
        if rng.random() < 0.5:  # a plausible preamble, then garbage
            data = _HEADER.pack(b"DQ", wire.VERSION, rng.choice(sorted(self._codes)), self.v.node_id(),
                                rng.randint(0, 65535), 0, rng.randint(0, 255)) + data
        return "garbage", data, ANY  # random bytes after a real preamble can be a valid frame

    def _flipped(self):
        rng = self.rng
        frame = bytearray(self._frame(rng.random() < 0.5)[2])
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(4, len(frame)) if len(frame) > 4 else 0
            frame[i] = rng.randint(0, 255)
        return "flipped", bytes(frame), ANY
