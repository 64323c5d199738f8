"""One node of the cluster as this node sees it (:class:`ClusterNode`), and
what a node may be called and where it may be: node IDs and addresses.

Invariants: a node ID is 40 lowercase hex digits (:func:`new_node_id`
makes them, :func:`valid_node_id` checks them); only a valid ID at a valid
address (:func:`valid_address`) joins, so the node file always loads again.
Bytes a peer sent reach the log only through :func:`printable`.
"""

import os

_HEX_DIGITS = frozenset(b"0123456789abcdef")
MAX_PORT = 65535 - 10000  # its bus port (+10000) must exist


def new_node_id() -> bytes:
    return os.urandom(20).hex().encode()


def valid_node_id(node_id: bytes) -> bool:
    """40 lowercase hex digits: what :func:`new_node_id` makes and the node
    file accepts."""
    return len(node_id) == 40 and _HEX_DIGITS.issuperset(node_id)


def printable(data: bytes) -> str:
    """Bytes a peer sent, for the log: printable ASCII, the rest escaped."""
    return repr(bytes(data))[2:-1] if data else "?"


def valid_address(host: bytes, port: int) -> bool:
    """A peer address the node can link to and write in its node file:
    a non-empty host of printable ASCII without spaces (an IPv6 address or
    DNS labels of 1 to 63 bytes), a port whose bus port exists.  The bus carries any bytes; membership takes only these."""
    if not (0 < port <= MAX_PORT and 0 < len(host) <= 255 and all(33 <= c <= 126 for c in host)):
        return False
    return b":" in host or all(0 < len(label) <= 63 for label in host.split(b"."))  # IPv6, or DNS labels


class ClusterNode:
    """What this node believes of one node (itself included): its address,
    its flags (handshake, PFAIL, FAIL, leaving), when it last talked and
    the failure reports gossip brought about it."""

    __slots__ = ("id", "host", "port", "handshake", "pfail", "fail", "leaving", "ping_sent",
                 "pong_received", "ping_received", "last_ping", "fail_reports", "connected", "created", "meet",
                 "explicit", "claimed_from", "extensions", "counts", "batches",
                 "settings", "settings_synced")

    def __init__(self, node_id: bytes, host: bytes = b"", port: int = 0, now: int = 0):
        self.id = node_id
        self.host = host
        self.port = port
        self.handshake = False
        self.meet = False  # send MEET (not PING) when the link comes up
        self.explicit = False  # a handshake an operator asked for (CLUSTER MEET)
        # A claim (a handshake under the ID its own MEET gave): the address
        # that MEET came from; b"" for every other node.
        self.claimed_from = b""
        self.pfail = False
        self.fail = False
        self.leaving = False
        self.ping_sent = 0  # ms of the oldest unanswered PING, 0 = none
        self.pong_received = 0  # ms of its last PONG
        self.ping_received = 0  # ms of its last PING or MEET (it talks to us on its own link)
        self.last_ping = 0
        self.fail_reports = {}  # reporter id -> ms of the report
        self.connected = False  # our outbound link is up (set by the adapter)
        self.created = now
        # The peer said it reads bus version 3 (H_EXTENSIONS): it gets job
        # records with their options; a peer of the previous version gets
        # version 2 frames, which it reads (a rolling upgrade).
        self.extensions = False
        # The peer said it reads bus version 4 (H_COUNTS): it answers the
        # cluster view's COUNTSASK; one that did not is never sent one.
        self.counts = False
        # The peer said it reads bus version 5 (H_BATCHES): the GOTJOBs of
        # one batch to it may leave as one GOTJOBS (disque.node.effects).
        self.batches = False
        # The peer said it reads bus version 6 (H_SETTINGS): it keeps the
        # catalog (disque.core.settings); ``settings_synced``: the catalogs
        # were exchanged since our link to it last came up.
        self.settings = False
        self.settings_synced = False

    @property
    def reachable(self) -> bool:
        return not (self.handshake or self.pfail or self.fail)

    def describe(self) -> str:
        """``<ID prefix> (<host>:<port>)``, for the log."""
        return "%s (%s:%d)" % (self.id[:8].decode(errors="replace"), self.host.decode(errors="replace"), self.port)

    def flag_names(self):
        names = []
        if self.leaving:
            names.append(b"leaving")
        if self.handshake:
            names.append(b"handshake")
        if self.fail:
            names.append(b"fail")
        elif self.pfail:
            names.append(b"fail?")
        return names
