"""QLIMIT (this project's extension, docs/extensions.md): a queue's rate
and concurrency limits, cluster-wide, through the catalog
(:mod:`disque.core.qlimits`).

    QLIMIT <queue>                                             show them
    QLIMIT <queue> [RATE <per-second> [BURST <n>]] [CONCURRENCY <n>]  set them
    QLIMIT <queue> NONE                                        remove them

A set replaces the queue's limits as a whole (a RATE alone removes a
CONCURRENCY set before).  The show is an array of field/value pairs: the
limits (``rate`` as a decimal string, ``burst``, ``concurrency``; 0 for
none), then this node's part of them and its counters (``rate-here``,
``concurrency-here``, ``in-flight``, ``held``); an empty array for a
queue without limits.
"""

import re

from ..core import qlimits
from ..core.catalog import MAX_NAME_LEN
from ..core.errors import CommandError
from ..resp import reply
from . import command
from .args import parse_ll
from .jobs import SYNTAX

E_RATE = CommandError(b"ERR", b"RATE must be a number greater than zero, at most 1000000 with at most 3 decimals")
E_BURST = CommandError(b"ERR", b"BURST must be a number greater than zero")
E_CONCURRENCY = CommandError(b"ERR", b"CONCURRENCY must be a number greater than zero")
E_BURST_ALONE = CommandError(b"ERR", b"BURST needs RATE")
E_NONE = CommandError(b"ERR", b"NONE takes no other option")
E_NAME = CommandError(b"ERR", b"a limited queue's name must have 1 to %d bytes" % MAX_NAME_LEN)
_RATE = re.compile(rb"(0|[1-9][0-9]{0,6})(?:\.([0-9]{1,3}))?\Z")


def parse_rate(value: bytes) -> int:
    """RATE's argument in thousandths a second; raises E_RATE."""
    m = _RATE.match(value)
    if m is None:
        raise E_RATE
    milli = int(m.group(1)) * 1000 + int((m.group(2) or b"0").ljust(3, b"0"))
    if not 0 < milli <= qlimits.MAX_RATE_MILLI:
        raise E_RATE
    return milli


def _count(value: bytes, error) -> int:
    n = parse_ll(value)
    if n is None or not 0 < n <= qlimits.MAX_COUNT:
        raise error
    return n


def parse_limit(args):
    """The options after the queue name: a Limit, or None for NONE;
    raises CommandError."""
    rate = burst = concurrency = 0
    i, n = 0, len(args)
    if n == 1 and args[0].lower() == b"none":
        return None
    while i < n:
        opt = args[i].lower()
        if i + 1 == n:
            raise E_NONE if opt == b"none" else SYNTAX
        value = args[i + 1]
        if opt == b"rate":
            rate = parse_rate(value)
        elif opt == b"burst":
            burst = _count(value, E_BURST)
        elif opt == b"concurrency":
            concurrency = _count(value, E_CONCURRENCY)
        else:
            raise E_NONE if opt == b"none" else SYNTAX
        i += 2
    if burst and not rate:
        raise E_BURST_ALONE
    if rate and not burst:
        burst = qlimits.default_burst(rate)
    return qlimits.Limit(rate, burst, concurrency)


def show(node, name: bytes) -> bytes:
    lim = node.qlimits.by_name.get(name)
    if lim is None:
        return reply.EMPTY_ARRAY
    limit = lim.limit
    rate_here = int(round(limit.rate_milli * lim.share))
    return reply.array((
        b"$4\r\nrate\r\n", reply.bulk(qlimits.format_rate(limit.rate_milli)),
        b"$5\r\nburst\r\n", reply.integer(limit.burst),
        b"$11\r\nconcurrency\r\n", reply.integer(limit.concurrency),
        b"$9\r\nrate-here\r\n", reply.bulk(qlimits.format_rate(rate_here)),
        b"$16\r\nconcurrency-here\r\n", reply.integer(lim.slots),
        b"$9\r\nin-flight\r\n", reply.integer(node.qlimits.inflight.get(name, 0)),
        b"$4\r\nheld\r\n", reply.integer(lim.held),
    ))


@command("qlimit", -2, "write fast")
def qlimit(ctx, client, argv):
    node = ctx.node
    name = argv[1]
    if len(argv) == 2:
        return show(node, name)
    limit = parse_limit(argv[2:])
    if not 0 < len(name) <= MAX_NAME_LEN:
        raise E_NAME
    node.settings.change(qlimits.KIND, name, b"" if limit is None else qlimits.encode(limit))
    return reply.OK
