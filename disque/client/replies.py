"""The replies of Disque's commands as the clients give them: how a reply
the wire layers give (txredisapi's or hiredis', status lines as ``str`` or
``bytes``) becomes the value a method of
:class:`~disque.client.commands.Commands` returns.

Invariants: job IDs, queue names and other strings come back as ``str``
(undecodable bytes kept by ``surrogateescape``), job bodies as ``bytes``,
numbers as ``int``; a nil reply is ``None`` (an empty list for job lists).
Each parser takes ``(reply, node_id)``, ``node_id`` being the node that
answered.  Pure: no transport.
"""

from typing import Callable, List, NamedTuple, Optional

from .job import Hello, Job, NodeInfo


class Page(NamedTuple):
    """One page of QSCAN or JSCAN: the cursor of the next page (0 after
    the last), the items, and the node that answered (later pages of the
    same cursor must go there)."""
    cursor: int
    items: list
    node: Optional[str]


def raw(reply, node):
    return reply


def text(value) -> Optional[str]:
    """A bulk or status reply as ``str`` (the wire layers give status lines
    as ``str`` or ``bytes``)."""
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "surrogateescape")


def text_reply(reply, node):
    return text(reply)


def int_reply(reply, node):
    return int(reply)


def text_list_reply(reply, node):
    return [text(v) for v in reply]


def _value(key: str, value):
    """A field of SHOW/QSTAT/JSCAN: integers as ``int``, lists of strings as
    lists of ``str``, the body as ``bytes``, other strings as ``str``."""
    if key == "body" or isinstance(value, int):
        return value
    if isinstance(value, list):
        if key == "backoff":  # [base, max] in ms (an extension's field)
            return [int(v) for v in value]
        return [v if isinstance(v, int) else text(v) for v in value]
    s = text(value)
    if s and (s.isdigit() or (s[0] == "-" and s[1:].isdigit())):
        return int(s)
    return s


def pairs(reply) -> Optional[dict]:
    """A flat ``[key, value, ...]`` reply as a dict (``None`` for nil)."""
    if reply is None:
        return None
    out = {}
    for i in range(0, len(reply) - 1, 2):
        key = text(reply[i])
        out[key] = _value(key, reply[i + 1])
    return out


def pairs_reply(reply, node):
    return pairs(reply)


def qlimit_reply(reply, node) -> dict:
    """QLIMIT queue: its fields as a dict, the rates as ``float``
    (deliveries per second); ``{}`` for a queue without limits."""
    out = pairs(reply) or {}
    for key in ("rate", "rate-here"):
        if key in out:
            out[key] = float(out[key])
    return out


def ok_reply(reply, node) -> bool:
    return text(reply) == "OK"


def parse_jobs(reply, node) -> List[Job]:
    """GETJOB / QPEEK: ``[[queue, id, body(, "nacks", n, "additional-deliveries", n)], ...]``
    (nil when GETJOB timed out) as a list of :class:`Job`."""
    if not reply:
        return []
    jobs = []
    for entry in reply:
        nacks = extra = None
        if len(entry) >= 7:
            counters = pairs(entry[3:])
            nacks, extra = counters.get("nacks"), counters.get("additional-deliveries")
        jobs.append(Job(text(entry[0]), text(entry[1]), entry[2], nacks, extra, node))
    return jobs


def parse_hello(reply, node=None, host: Optional[str] = None) -> Hello:
    """HELLO: ``[version, my_id, [id, host, port, priority], ...]``.  A node
    that does not know its own address advertises an empty host: ``host``
    (the address the client reached it at) stands in for it."""
    nodes = []
    for entry in reply[2:]:
        node_host = text(entry[1]) or host or ""
        nodes.append(NodeInfo(text(entry[0]), node_host, int(entry[2]), int(entry[3])))
    return Hello(int(reply[0]), text(reply[1]), tuple(nodes))


def parse_info(reply, node=None) -> dict:
    """INFO's ``key:value`` lines as a dict of strings (sections flattened)."""
    out = {}
    for line in text(reply).splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            out[key] = value
    return out


def scan_page(items: Callable):
    def parse(reply, node):
        return Page(int(reply[0]), [items(entry) for entry in reply[1]], node)
    return parse
