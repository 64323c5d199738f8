"""The node's view of the cluster: itself and the peers it knows.

Single-node for now; the cluster bus (gossip, failure detection) feeds this
table.  ``size`` counts known nodes including myself, ``reachable`` counts
peers currently reachable (the original's ``reachable_nodes_count`` does not
include myself).
"""

import os


def new_node_id() -> bytes:
    return os.urandom(20).hex().encode()


class ClusterNode:
    __slots__ = ("id", "host", "port", "flags", "leaving")

    def __init__(self, node_id: bytes, host: bytes = b"", port: int = 0):
        self.id = node_id
        self.host = host
        self.port = port
        self.flags = set()
        self.leaving = False


class ClusterView:
    __slots__ = ("myself", "nodes", "leaving")

    def __init__(self, node_id: bytes, host: bytes = b"", port: int = 0):
        self.myself = ClusterNode(node_id, host, port)
        self.nodes = {node_id: self.myself}
        self.leaving = False

    @property
    def my_id(self) -> bytes:
        return self.myself.id

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def reachable(self) -> int:
        """Reachable peers, myself excluded."""
        return sum(1 for n in self.nodes.values() if n is not self.myself and "fail" not in n.flags and "handshake" not in n.flags and "noaddr" not in n.flags)

    def peers(self):
        return [n for n in self.nodes.values() if n is not self.myself]
