"""NodeState's cluster side: bus messages in, bus messages out.

:class:`ClusterMixin` is mixed into :class:`disque.core.node.NodeState`; it
keeps the local state machine in ``node.py`` readable as the spec's
"Generic functions" and puts the message-driven parts here, section by
section as ``seeds/disque-readme.txt`` names them.  Every handler runs at
``self.now`` and reports what to send as effects in ``self.outbox``.
"""

from . import messages as M
from .cluster import new_node_id

CRON_PERIOD_MS = 100


class ClusterMixin:
    # ------------------------------------------------------------------
    # Membership (delegated to ClusterView) and the bus entry points
    # ------------------------------------------------------------------

    def meet(self, host: bytes, port: int) -> None:
        self.cluster.meet(host, port, self.now)

    def forget(self, node_id: bytes) -> bool:
        return self.cluster.forget(node_id, self.now)

    def cluster_reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every peer; HARD also takes a new ID and
        drops every job and queue (a fresh node)."""
        if hard:
            new_id = new_node_id()
            self.flush_all()
            self.cluster.reset(new_id)
            self.ids.set_node_id(new_id)
            self._my_delivered = (new_id,)
        else:
            self.cluster.reset()

    def link_up(self, node_id: bytes) -> None:
        self.cluster.link_up(node_id, self.now)

    def link_down(self, node_id: bytes) -> None:
        self.cluster.link_down(node_id)

    def bus_receive(self, header: M.Header, msg, link) -> None:
        """One message from the bus.  ``link`` is the adapter's connection
        (opaque here but for ``node_id``, ``peer_host`` and ``local_host``)."""
        known = self.cluster.receive(header, msg, link, self.now)
        if not known:
            return
        handler = self._HANDLERS.get(type(msg))
        if handler is not None:
            handler(self, header.sender, msg)

    def cluster_cron(self) -> None:
        if self.now - self._last_cron >= CRON_PERIOD_MS:
            self._last_cron = self.now
            self.cluster.cron(self.now)

    def set_leaving(self, leaving: bool) -> None:
        self.cluster.set_leaving(leaving)

    # ------------------------------------------------------------------
    # Hooks called by the local state machine (node.py)
    # ------------------------------------------------------------------

    def cluster_queued(self, job, nack: bool) -> None:
        pass

    def cluster_willqueue(self, job) -> None:
        pass

    def cluster_setack(self, job) -> None:
        pass

    def cluster_deljob(self, job) -> None:
        pass

    def cluster_deljob_broadcast(self, job_id: bytes) -> None:
        pass

    def cluster_working(self, job) -> None:
        pass

    def cluster_pause(self, queue_name: bytes, flags: int) -> None:
        """PAUSE ... bcast: propagate the queue state to reachable nodes."""

    def need_jobs(self, queue_name: bytes, reached_zero: bool) -> None:
        """Federation hook: a consumer found ``queue_name`` empty."""

    _HANDLERS = {}
