"""``/api/cluster``: the queues summed over the cluster, with each node's
part (docs/observability.md, "The cluster view").

The node serving the request asks its peers for their counts over the
cluster bus (:meth:`disque.node.census.Census.gather`) and adds its own.
The answer says, node by node, whether its counts are in: a node that
could not be asked or did not answer in time is listed with the reason
(``unreachable``, ``old-version``, ``timeout``), its counts left out of
every sum, and ``complete`` is false.  Nothing is guessed for it.

Each node gives its ``limit`` longest queues among those the user may
touch (its own ACL patterns go with the question); a queue's per-node
lengths show ``null`` for a node whose list was cut before it (it holds
that queue or not: this node does not know), 0 for a node whose list is
whole and does not hold it.
"""

from ..commands import views
from ..commands.views import text
from ..core.queue import PAUSE_NAMES

OK = "ok"  # (disque.node.census.OK: the runtime's census gives the peers' answers)

_FIELDS = ("len", "added", "removed", "acked", "nacked", "moved_in", "moved_out")


def _node_row(row, answer, counts, dashboard):
    row = dict(row)
    row["answer"] = answer
    row["jobs"] = counts.jobs if counts is not None else None
    row["queued"] = counts.queued if counts is not None else None
    row["queues"] = counts.total if counts is not None else None
    row["dashboard"] = dashboard
    return row


def view(ctx, mine, peers, limit: int) -> dict:
    """The reply of ``/api/cluster``: ``mine``, this node's
    :class:`~disque.core.messages.Counts`; ``peers``, the
    :class:`~disque.node.census.Peer` list of a gathering."""
    table = views.cluster_nodes(ctx)
    by_id = {p.id.decode(): p for p in peers}
    myself = table["myself"]
    nodes = []
    answers = {}  # node ID -> Counts, of the nodes whose counts are in
    for row in table["nodes"]:
        if row["myself"]:
            nodes.append(_node_row(row, OK, mine, None))
            answers[myself] = mine
            continue
        peer = by_id.get(row["id"])
        if peer is None:  # (met between the gathering and now: not asked)
            nodes.append(_node_row(row, "unreachable", None, None))  # (census.UNREACHABLE)
            continue
        nodes.append(_node_row(row, peer.answer, peer.counts, peer.dashboard))
        if peer.counts is not None:
            answers[row["id"]] = peer.counts
    queues = {}
    for node_id, counts in answers.items():
        for q in counts.queues:
            name = text(q.name)
            merged = queues.get(name)
            if merged is None:
                merged = queues[name] = dict.fromkeys(_FIELDS, 0)
                merged["name"] = name
                merged["nodes"] = {}
                merged["paused"] = {}
            for field in _FIELDS:
                merged[field] += getattr(q, field)
            merged["nodes"][node_id] = q.len
            if q.paused:
                merged["paused"][node_id] = PAUSE_NAMES[q.paused].decode()
    for merged in queues.values():  # a node's absence: 0 if its list is whole, unknown if it was cut
        for node_id, counts in answers.items():
            if node_id not in merged["nodes"]:
                merged["nodes"][node_id] = 0 if counts.matching <= len(counts.queues) else None
    shown = sorted(queues.values(), key=lambda q: (-q["len"], q["name"]))[:limit]
    return {
        "time": ctx.node.now, "myself": myself, "limit": limit,
        "asked": len(nodes), "answered": len(answers), "complete": len(answers) == len(nodes),
        "nodes": nodes, "distinct": len(queues), "queues": shown,
    }
