"""What both clients of a cluster hold: the settings, the topology and the
consumer rule, set up once for the Twisted client
(:class:`~disque.client.txclient.DisqueClient`) and the blocking one
(:class:`~disque.client.blocking.BlockingClient`).

Invariants: ``topology`` starts from the seeds given, in order; the
consumer rule is on (``tracker`` set) only with a ``switch_window``, and
moves a client only with discovery on; ``switches`` counts its moves.
Times are in seconds.  Pure: no reactor, no socket (the subclasses bring
the transport and the clock).
"""

from typing import Iterable, Optional, Sequence, Tuple, Union

from . import errors
from .commands import Commands
from .nodes import Address, OriginTracker, Topology, as_address
from .job import NodeInfo
from .tls import TLSOptions

NodeSpec = Union[str, Tuple[str, int], int]

DEFAULT_SEEDS = ("127.0.0.1:7711",)


class ClusterClient(Commands):
    """The settings of a cluster-aware client (see the clients' modules):
    ``nodes`` the seed addresses (``"host:port"``, ``("host", port)`` or a
    port); ``password`` (and ``username``) sent with AUTH on every
    connection; ``tls`` a :class:`~disque.client.tls.TLSOptions` for nodes
    serving TLS; ``discover=False`` keeps the client on the seeds;
    ``switch_window``/``switch_share`` the consumer rule (``None`` window:
    off)."""

    def __init__(self, nodes: Sequence[NodeSpec] = DEFAULT_SEEDS, password: Optional[str] = None,
                 tls: Optional[TLSOptions] = None, connect_timeout: float = 5.0, reply_timeout: float = 10.0,
                 failover_timeout: float = 30.0, hello_interval: float = 10.0, discover: bool = True,
                 switch_window: Optional[int] = 100, switch_share: float = 0.5, *, username: Optional[str] = None):
        self.topology = Topology([as_address(n) for n in nodes])
        self.username = username
        self.password = password
        self.tls = tls
        self.connect_timeout = connect_timeout
        self.reply_timeout = reply_timeout
        self.failover_timeout = failover_timeout
        self.hello_interval = hello_interval
        self.discover = discover
        self.tracker = OriginTracker(switch_window, switch_share) if switch_window else None
        self._target: Optional[Address] = None  # where the consumer rule wants to go
        self.switches = 0  # how many times the consumer rule moved the client

    def _follow_producers(self, node_id: Optional[str], origins: Iterable[str], now: float) -> Optional[NodeInfo]:
        """The consumer rule, after GETJOB on the current node ``node_id``
        gave jobs created on ``origins`` (ID prefixes): the node to move to
        (then counted and remembered as the next target), or None."""
        if self.tracker is None or not node_id or not self.discover:
            return None
        info = self.topology.consumer_target(self.tracker, node_id, origins, now)
        if info is not None:
            self.switches += 1
            self._target = (info.host, info.port)
        return info

    def _gave_up(self, now: float, deadline: float) -> Optional[errors.ConnectionError]:
        """After a round of tries in which no node could be used: the error
        the call fails with, or ``None`` to try again as backoffs end.

        The call fails at ``deadline`` (``failover_timeout``), or at once
        when every node known failed for a cause that lasts (it answers,
        but not as the client's settings need: trying again would change
        nothing).  The error is that node's own when there is one node and
        it failed so (:data:`~disque.client.errors.SETUP_ERRORS`), else
        :class:`~disque.client.errors.NoNodeAvailable` naming each node."""
        failures = self.topology.failures()
        lasting = failures is not None and all(getattr(e, "lasting", False) for e in failures.values())
        if now < deadline and not lasting:
            return None
        if failures is not None and len(failures) == 1:
            [error] = failures.values()
            if isinstance(error, errors.SETUP_ERRORS):
                return error
        return errors.NoNodeAvailable.of(self.topology.named_errors())
