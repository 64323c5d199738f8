"""The original's federation algorithm (``federation-policy default``).

From ``seeds/disque-readme.txt`` ("Cluster messages related to nodes
federation" and "When I consume and produce from different nodes..."):

* a node whose consumers find a queue empty sends NEEDJOBS(queue, count);
* to *recent sources* (nodes that answered with jobs in the last
  ``SOURCE_TTL_MS``) "ad hoc", with a delay growing from 25 ms to 2 s
  between requests while nothing comes back, reset to 25 ms when jobs do;
* to *every* node ("broadcast"), to discover sources, with a delay growing
  from 2 s to 30 s;
* with no throttling at all when the queue just dropped to zero (a client
  took the last job, possibly a blocked one) while jobs are being imported
  (positive import rate): a steady stream must not stall on delays;
* the count asked for is what the consumers can take: the blocked clients,
  or twice the jobs imported in the last second when that is more (a
  stream must be able to drain a backlog at the source, not just keep it);
* when asked, a node gives up to the count requested from its queue.

A burst of demand after a quiet period (no request for longer than the
broadcast maximum) starts again from the minimum delays, so the first
GETJOB on a cold queue asks at once.
"""

from zope.interface import implementer

from ..interfaces import IFederationPolicy, IFederationPolicyFactory, IFederationState

BCAST_MIN_DELAY = 2000  # ms
BCAST_MAX_DELAY = 30000
ADHOC_MIN_DELAY = 25
ADHOC_MAX_DELAY = 2000
SOURCE_TTL_MS = 5000  # a source is "recent" this long after its last YOURJOBS
RATE_WINDOW_MS = 1000
MAX_REQUEST = 1000  # jobs asked for in one NEEDJOBS


@implementer(IFederationState)
class QueueFederation:
    __slots__ = ("bcast_time", "bcast_delay", "adhoc_time", "adhoc_delay", "last_request", "responders", "imports")

    def __init__(self):
        self.bcast_time = None
        self.bcast_delay = BCAST_MIN_DELAY
        self.adhoc_time = None
        self.adhoc_delay = ADHOC_MIN_DELAY
        self.last_request = None
        self.responders = {}  # node id -> ms of its last YOURJOBS
        self.imports = []  # (ms, count) of recent YOURJOBS, oldest first

    def sources(self):
        return tuple(self.responders)

    def import_rate(self, now):
        return sum(n for t, n in self.imports if now - t < RATE_WINDOW_MS)

    def _expire(self, now):
        for node_id, t in list(self.responders.items()):
            if now - t >= SOURCE_TTL_MS:
                del self.responders[node_id]
        while self.imports and now - self.imports[0][0] >= RATE_WINDOW_MS:
            self.imports.pop(0)


def state_of(queue):
    if queue.fed is None:
        queue.fed = QueueFederation()
    return queue.fed


@implementer(IFederationPolicy)
class DefaultPolicy:
    def wanted(self, queue, now, reason, peers, waiting):
        if not peers:
            return (), 0
        st = state_of(queue)
        st._expire(now)
        if st.last_request is None or now - st.last_request > BCAST_MAX_DELAY:
            st.bcast_time = st.adhoc_time = None  # a new burst of demand
            st.bcast_delay, st.adhoc_delay = BCAST_MIN_DELAY, ADHOC_MIN_DELAY
        rate = st.import_rate(now)
        # Twice the recent import rate: enough to keep up with a stream and
        # to drain a backlog that built up at the source meanwhile (asking
        # for exactly the rate would carry that backlog forever).
        count = min(max(1, waiting, 2 * rate), MAX_REQUEST)
        peers = set(peers)
        targets = set()
        responders = [n for n in st.responders if n in peers]
        if responders:
            stream = reason == "zero-blocked" or (reason == "zero" and rate > 0)
            if stream or st.adhoc_time is None or now - st.adhoc_time >= st.adhoc_delay:
                targets.update(responders)
                if not stream and st.adhoc_time is not None:
                    st.adhoc_delay = min(st.adhoc_delay * 2, ADHOC_MAX_DELAY)
                st.adhoc_time = now
        if st.bcast_time is None or now - st.bcast_time >= st.bcast_delay:
            targets.update(peers)
            if st.bcast_time is not None:
                st.bcast_delay = min(st.bcast_delay * 2, BCAST_MAX_DELAY)
            st.bcast_time = now
        if targets:
            st.last_request = now
        return tuple(sorted(targets)), count

    def received(self, queue, sender, count, now):
        st = state_of(queue)
        st.responders[sender] = now
        st.imports.append((now, count))
        st.adhoc_delay = ADHOC_MIN_DELAY
        st.adhoc_time = None  # the next ad hoc request may go at once
        st._expire(now)

    def to_serve(self, queue, requester, count, now):
        return min(count, len(queue.jobs))


@implementer(IFederationPolicyFactory)
class DefaultPolicyFactory:
    name = "default"
    description = "The original's NEEDJOBS/YOURJOBS algorithm."
    argStringFormat = "No arguments."

    def makePolicy(self, argstring, config):
        return DefaultPolicy()


factory = DefaultPolicyFactory()
