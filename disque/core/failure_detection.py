"""Failure detection (the spec's "distributed failure detection via
gossip"): PFAIL, FAIL and their clearing.  :class:`FailureDetection` is a
part of :class:`~disque.core.membership.ClusterView` and works on its
state (``nodes``, ``myself``, ``node_timeout``, ``outbox``).

Every peer is pinged at least every ``min(1 s, node_timeout / 2)``.  A
peer is suspected (PFAIL) once we have waited ``node_timeout`` to hear
from it (:meth:`FailureDetection._silent_since`): while our link to it is
up, for the PONG to our oldest unanswered PING; while it is down, for any
word of it (PONG, PING or MEET) since its last one, or since a PING of
ours still unanswered if that came later.  A PFAIL node that a majority of
the cluster also reports as PFAIL or FAIL (reports are gossip, valid for
``2 * node_timeout``) becomes FAIL, broadcast to every node.  Failure
detection only steers replication and what HELLO tells clients (nothing
is failed over), so both flags clear as soon as the peer talks:

* a PONG to our PING (the original's only way back; its cron reconnects a
  lost link every 100 ms to ask, and so do our links, see
  :mod:`disque.bus.links`);
* a PING or MEET it sends us, such as the first message of a restarted
  node on the link it opens at start-up.  While our own link is down it
  also starts the wait again (a PING pending on a lost link is not waited
  for any more): a peer that came back counts as reachable for
  ``node_timeout`` from its last word, as after a PONG, and is not flagged
  again by the next cron, so an ADDJOB asking it for a copy meanwhile
  waits for the copy instead of answering NOREPL.
"""

from . import messages
from .effects import Notice


class FailureDetection:
    """PFAIL and FAIL of the cluster view's nodes."""

    __slots__ = ()

    @staticmethod
    def _silent_since(node) -> int:
        """Since when we have been waiting to hear from ``node`` (ms; it is
        suspected ``node_timeout`` later), 0 if we are not waiting.  With
        our link up: since our oldest unanswered PING, if one is pending.
        With it down: since the latest of its last PONG, its last PING or
        MEET and a PING of ours still unanswered, or else since we learnt
        of it."""
        if node.connected:
            return node.ping_sent
        return max(node.ping_sent, node.pong_received, node.ping_received) or node.created

    def _fail_on_majority(self, node, now) -> None:
        """Flag the suspected ``node`` as failing, and tell every node, once
        a majority of the cluster (myself included) reports it."""
        valid = now - 2 * self.node_timeout
        reports = sum(1 for t in node.fail_reports.values() if t >= valid)
        if reports + 1 >= self.size // 2 + 1:
            self._flag_failed(node, "by %d of %d nodes" % (reports + 1, self.size))
            self.broadcast(messages.Fail(node.id))

    def _flag_failed(self, node, why: str) -> None:
        node.fail = True
        node.pfail = True
        self.outbox.append(Notice("Node %s flagged as failing, %s" % (node.describe(), why)))

    def _clear_failure(self, node) -> None:
        if node.fail:
            self.outbox.append(Notice("Node %s is reachable again: no longer failing" % node.describe()))
        node.pfail = node.fail = False
