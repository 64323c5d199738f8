"""Which node a cluster-aware client talks to (pure: no reactor, no socket;
the time is passed in, so tests drive it with plain numbers).

:class:`Topology` follows the specification's "Client libraries" section:
start from the seed addresses, learn the cluster with HELLO, prefer the
lowest priority value (a leaving or failing node advertises a high one),
pick at random among equals, and back off from a node that failed.
:class:`OriginTracker` is its consumer rule: switch to the node that
produces most of the jobs a consumer receives, seen from job ID prefixes.
"""

import collections
import random
from typing import Dict, Iterable, List, Optional, Tuple

from .errors import listed, node_address
from .job import Hello, NodeInfo

LEAVING_PRIORITY = 100  # what HELLO advertises for a leaving node

Address = Tuple[str, int]


def parse_address(spec: str, default_port: int = 7711) -> Address:
    """``host:port``, ``host``, ``[v6]:port`` or ``port`` -> (host, port)."""
    spec = spec.strip()
    if spec.isdigit():
        return "127.0.0.1", int(spec)
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    if spec.count(":") == 1:
        host, port = spec.split(":")
        return host, int(port)
    return spec, default_port


def as_address(spec) -> Address:
    """A node address given as ``"host:port"``, ``(host, port)`` or a port."""
    if isinstance(spec, tuple):
        return spec[0], int(spec[1])
    if isinstance(spec, int):
        return "127.0.0.1", spec
    return parse_address(spec)


class Candidate:
    """A node the client may connect to: its address, and its ID once a
    HELLO named it (``None`` for a seed not yet reached)."""

    __slots__ = ("host", "port", "id", "priority")

    def __init__(self, host: str, port: int, id: Optional[str] = None, priority: int = 1):
        self.host, self.port, self.id, self.priority = host, port, id, priority

    @property
    def address(self) -> Address:
        return self.host, self.port

    def __repr__(self):
        return "Candidate(%s:%d %s p%d)" % (self.host, self.port, self.id, self.priority)


class Topology:
    """The nodes a client knows and the order in which to try them.

    Invariants: a node that failed is not offered again before its backoff
    (``backoff_initial`` doubling per consecutive failure up to
    ``backoff_max``, with +-25% jitter) ends; a success clears it.  Among
    nodes that are not backing off, lower priority values come first, ties
    in random order; seeds that no HELLO has named come last."""

    def __init__(self, seeds: Iterable[Address], backoff_initial: float = 0.1,
                 backoff_max: float = 5.0, rng: Optional[random.Random] = None):
        self.seeds: List[Address] = list(seeds)
        if not self.seeds:
            raise ValueError("at least one node address is needed")
        self.nodes: Dict[str, NodeInfo] = {}
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.rng = rng or random.Random()
        self._failures: Dict[Address, Tuple[float, int]] = {}  # address -> (until, consecutive)
        self.errors: Dict[Address, object] = {}  # last error (or its words) per address
        self._leaving: set = set()  # node IDs that answered -LEAVING

    # -- what the nodes say ------------------------------------------------------

    def learn(self, hello: Hello) -> None:
        """Take HELLO's node list as the cluster (a node no longer listed
        is forgotten; seeds are kept).  A node that answered -LEAVING stays
        ranked as leaving until its own HELLO says otherwise (the others
        learn it by gossip, a moment later)."""
        self.nodes = {n.id: n for n in hello.nodes}
        for node_id in list(self._leaving):
            info = self.nodes.get(node_id)
            if node_id == hello.node_id and info is not None and info.priority < LEAVING_PRIORITY:
                self._leaving.discard(node_id)
            else:
                self._rank_leaving(node_id)

    def mark_leaving(self, node_id: str) -> None:
        """A node answered -LEAVING: rank it as HELLO will soon."""
        self._leaving.add(node_id)
        self._rank_leaving(node_id)

    def _rank_leaving(self, node_id: str) -> None:
        info = self.nodes.get(node_id)
        if info is not None and info.priority < LEAVING_PRIORITY:
            self.nodes[node_id] = info._replace(priority=LEAVING_PRIORITY)

    def priority(self, node_id: Optional[str]) -> int:
        info = self.nodes.get(node_id) if node_id else None
        return info.priority if info else 1

    def by_prefix(self, prefix: str) -> Optional[NodeInfo]:
        """The node whose ID starts with a job ID's node prefix."""
        for node_id, info in self.nodes.items():
            if node_id.startswith(prefix):
                return info
        return None

    def node(self, node_id: str) -> Optional[NodeInfo]:
        return self.nodes.get(node_id)

    # -- failures ----------------------------------------------------------------

    def failed(self, address: Address, now: float, error=None) -> float:
        """Record a failure to reach ``address`` (``error``: the exception,
        or words); the time it may be tried again."""
        _, count = self._failures.get(address, (0.0, 0))
        delay = min(self.backoff_max, self.backoff_initial * (2 ** count))
        delay *= self.rng.uniform(0.75, 1.25)
        until = now + delay
        self._failures[address] = (until, count + 1)
        if error:
            self.errors[address] = error
        return until

    def failures(self) -> Optional[Dict[Address, object]]:
        """The last error of every node known, or ``None`` while one of
        them has none (never tried, or its last attempt succeeded)."""
        out = {}
        for c in self._all():
            if c.address not in self.errors:
                return None
            out[c.address] = self.errors[c.address]
        return out

    def succeeded(self, address: Address) -> None:
        self._failures.pop(address, None)
        self.errors.pop(address, None)

    def available(self, address: Address, now: float) -> bool:
        until, _ = self._failures.get(address, (0.0, 0))
        return now >= until

    def next_retry(self, now: float) -> float:
        """When the first backing-off node may be tried again (``now`` if one
        is available already)."""
        times = [self._failures.get(c.address, (now, 0))[0] for c in self._all()]
        return max(now, min(times)) if times else now

    # -- choice ------------------------------------------------------------------

    def _all(self) -> List[Candidate]:
        known = [Candidate(n.host, n.port, n.id, n.priority) for n in self.nodes.values()]
        addresses = {c.address for c in known}
        seeds = [Candidate(h, p) for h, p in self.seeds if (h, p) not in addresses]
        return known + seeds

    def candidates(self, now: float) -> List[Candidate]:
        """The nodes to try now, best first."""
        nodes = [c for c in self._all() if self.available(c.address, now)]
        keyed = [((c.id is None, c.priority, self.rng.random()), c) for c in nodes]
        keyed.sort(key=lambda kc: kc[0])
        return [c for _, c in keyed]

    def plan(self, now: float, discover: bool = True, first: Optional[Address] = None) -> List[Candidate]:
        """:meth:`candidates`, only the seeds without ``discover``, and
        ``first`` (where the consumer rule goes) ahead of the others."""
        nodes = self.candidates(now)
        if not discover:
            seeds = set(self.seeds)
            nodes = [c for c in nodes if c.address in seeds]
        if first is not None:
            nodes.sort(key=lambda c: c.address != first)
        return nodes

    def outranked(self, node_id: Optional[str], now: float) -> bool:
        """Whether a node that can be tried now has a better priority than
        ``node_id`` (the current node is leaving or failing: move on)."""
        best = min((c.priority for c in self.candidates(now) if c.id), default=None)
        return best is not None and self.priority(node_id) > best

    def consumer_target(self, tracker: "OriginTracker", node_id: str, origins: Iterable[str],
                        now: float) -> Optional[NodeInfo]:
        """The consumer rule after a GETJOB on ``node_id`` received jobs of
        ``origins`` (ID prefixes): the node to move to, or ``None``.  Only a
        node that is known, can be tried now, and ranks no worse than the
        current one is chosen."""
        tracker.observe(origins)
        prefix = tracker.suggest(node_id[:8])
        if prefix is None:
            return None
        info = self.by_prefix(prefix)
        if info is None or info.priority > self.priority(node_id):
            return None
        if not self.available((info.host, info.port), now):
            return None
        return info

    def describe_errors(self) -> str:
        """``<host:port> (<reason>), ...`` for each node's last error."""
        return listed(self.named_errors())

    def named_errors(self) -> Dict[str, object]:
        """The last error of each node that failed, by ``host:port``."""
        return {node_address(h, p): e for (h, p), e in sorted(self.errors.items(), key=lambda item: item[0])}


class OriginTracker:
    """The consumer rule of the specification: if most of the jobs a
    consumer received were produced on one other node, consume from that
    node instead, so jobs stop travelling between nodes.

    ``observe`` takes the node prefix of each received job.  Once ``window``
    jobs are seen, :meth:`suggest` names the prefix of a node that produced
    more than ``share`` of them and more than the current node, and starts a new
    window (so a switch needs a full window of fresh evidence: no flapping
    faster than ``window`` jobs)."""

    def __init__(self, window: int = 100, share: float = 0.5):
        if window < 1 or not 0 < share < 1:
            raise ValueError("window must be >= 1 and share in (0, 1)")
        self.window = window
        self.share = share
        self._recent = collections.deque(maxlen=window)

    def observe(self, prefixes: Iterable[str]) -> None:
        self._recent.extend(prefixes)

    def reset(self) -> None:
        self._recent.clear()

    def suggest(self, current_prefix: Optional[str]) -> Optional[str]:
        if len(self._recent) < self.window:
            return None
        counts = collections.Counter(self._recent)
        self._recent.clear()
        prefix, count = counts.most_common(1)[0]
        if count > self.share * self.window and count > counts.get(current_prefix, 0):
            return prefix
        return None
