"""The node file's text (``cluster-config-file``; the runtime saves it
crash-safely: :mod:`disque.node.nodefile`): one line per known node,
``<id> <host>:<port> <flags>``, flags among ``myself``, ``leaving`` and
``noflags``.  :class:`NodeFileFormat` is a part of
:class:`~disque.core.membership.ClusterView`: it writes the view as the
file and restores peers read from it.

Invariants: only members are written (no handshake); exactly one line is
``myself``; what :meth:`NodeFileFormat.nodes_file_text` writes
:func:`parse_nodes_file` reads back.
"""

from .cluster_node import MAX_PORT, ClusterNode, valid_node_id
from .effects import Link


class NodeFileFormat:
    """The cluster view as its node file keeps it."""

    __slots__ = ()

    def nodes_file_text(self) -> bytes:
        lines = [b"# disque cluster nodes file: written by the node, do not edit while it runs"]
        for n in [*self.peers(), self.myself]:
            if n.handshake:
                continue
            flags = []
            if n is self.myself:
                flags.append(b"myself")
            if n.leaving or (n is self.myself and self.leaving):
                flags.append(b"leaving")
            lines.append(b"%s %s:%d %s" % (n.id, n.host, n.port, b",".join(flags) or b"noflags"))
        return b"\n".join(lines) + b"\n"

    def restore(self, leaving: bool, peers, now: int) -> None:
        """Peers from the node file: known (no handshake), linked at once,
        suspected only if they stay silent for ``node_timeout``."""
        self.leaving = self.myself.leaving = leaving
        for node_id, host, port, peer_leaving in peers:
            if node_id in self.nodes:
                continue
            node = ClusterNode(node_id, host, port, now)
            node.leaving = peer_leaving
            self.nodes[node_id] = node
            self.outbox.append(Link(node_id, host, port))


def parse_nodes_file(text: bytes):
    """``(my_id, leaving, [(id, host, port, leaving), ...])`` from a node
    file; raises ValueError with a line number on anything malformed."""
    my_id = None
    leaving = False
    peers = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError("line %d: expected '<id> <host>:<port> <flags>'" % lineno)
        node_id, addr, flags = parts
        if not valid_node_id(node_id):
            raise ValueError("line %d: bad node ID" % lineno)
        host, sep, port = addr.rpartition(b":")
        if not sep or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
            raise ValueError("line %d: bad address" % lineno)
        names = set(flags.split(b","))
        if not names <= {b"myself", b"leaving", b"noflags"}:
            raise ValueError("line %d: unknown flags" % lineno)
        if b"myself" in names:
            if my_id is not None:
                raise ValueError("line %d: a second 'myself'" % lineno)
            my_id = node_id
            leaving = b"leaving" in names
        else:
            peers.append((node_id, host, int(port), b"leaving" in names))
    if my_id is None:
        raise ValueError("no 'myself' line")
    return my_id, leaving, peers
