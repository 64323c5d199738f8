"""The original's federation algorithm (``federation-policy default``).

As Disque 1.0's queue.c does it (``needJobsForQueue``, ``receiveYourJobs``,
``receiveNeedJobs``), described in ``seeds/disque-readme.txt``:

* When consumers find a queue empty, at most every 2 s, 4 s, ... 30 s
  (exponential, reset when a *new* source appears) NEEDJOBS for a single
  job is broadcast to every node, to discover sources.
* To the *recent sources* (nodes whose YOURJOBS came in the last 5 s)
  NEEDJOBS goes "ad hoc" for ``import rate / sources`` jobs (5 to 100),
  at most every 25 ms, 50 ms, ... 2 s (exponential, reset by every imported
  job), and with no delay at all when the queue just dropped to zero while
  jobs are being imported.
* "Dropped to zero" with no import going on does nothing: the next consumer
  that blocks asks.
* The import rate is jobs per second over the current and previous
  one-second windows (at least 50 ms), zero when nothing came for 5 s.
* Asked for ``count`` jobs, a node gives them if it has at least twice as
  many, otherwise half its queue (at least one); it gives nothing while it
  imports jobs of that queue itself (both sides would just swap them).
"""

import math

from zope.interface import implementer

from ..interfaces import IFederationPolicy, IFederationState

BCAST_MIN_DELAY = 2000  # ms
BCAST_MAX_DELAY = 30000
ADHOC_MIN_DELAY = 25
ADHOC_MAX_DELAY = 2000
SOURCE_TTL_MS = 5000  # a source is "recent" this long after its last job
IMPORT_RATE_WINDOW = 5000  # no import for this long: the rate is zero
MIN_REQUEST = 5
MAX_REQUEST = 100


@implementer(IFederationState)
class QueueFederation:
    __slots__ = ("bcast_time", "bcast_attempt", "adhoc_time", "adhoc_attempt", "responders",
                 "cur_time", "cur_count", "prev_time", "prev_count")

    def __init__(self, now):
        self.bcast_time = 0
        self.bcast_attempt = 0
        self.adhoc_time = 0
        self.adhoc_attempt = 0
        self.responders = {}  # node id -> ms of its last job
        self.cur_time = self.prev_time = now
        self.cur_count = self.prev_count = 0

    def sources(self):
        return tuple(self.responders)

    def import_rate(self, now):
        if now - self.cur_time > IMPORT_RATE_WINDOW:
            return 0
        elapsed = max(now - self.prev_time, 50)
        return math.ceil((self.prev_count + self.cur_count) * 1000 / elapsed)

    def count_import(self, now):
        if now - self.cur_time > 1000:
            self.prev_time, self.prev_count = self.cur_time, self.cur_count
            self.cur_time, self.cur_count = now, 0
        self.cur_count += 1

    def valid_responders(self, now):
        for node_id, t in list(self.responders.items()):
            if now - t > SOURCE_TTL_MS:
                del self.responders[node_id]
        return self.responders


def state_of(queue, now):
    if queue.fed is None:
        queue.fed = QueueFederation(now)
    return queue.fed


@implementer(IFederationPolicy)
class DefaultPolicy:
    """The policy of one node.  The keyword arguments are the limits the
    original hard-codes (the module constants are their defaults); the
    ``default`` factory passes those of ``federation-policy
    default:key=value,...``."""

    def __init__(self, min_request=MIN_REQUEST, max_request=MAX_REQUEST, bcast_max_delay=BCAST_MAX_DELAY,
                 adhoc_max_delay=ADHOC_MAX_DELAY):
        if not 1 <= min_request <= max_request:
            raise ValueError("min-request (%d) must be between 1 and max-request (%d)"
                             % (min_request, max_request))
        self.min_request = min_request
        self.max_request = max_request
        self.bcast_max_delay = bcast_max_delay
        self.adhoc_max_delay = adhoc_max_delay

    def wanted(self, queue, now, reason, peers, waiting):
        st = state_of(queue, now)
        rate = st.import_rate(now)
        zero = reason != "waiting"
        if zero and rate == 0:
            return ()
        responders = [n for n in st.valid_responders(now) if n in peers]
        to_fetch = rate // len(responders) if responders else self.min_request
        to_fetch = min(max(to_fetch, self.min_request), self.max_request)
        requests = []
        bcast_delay = min(BCAST_MIN_DELAY << min(st.bcast_attempt, 30), self.bcast_max_delay)
        if now - st.bcast_time > bcast_delay and peers:
            st.bcast_time = now
            st.bcast_attempt += 1
            requests.append((tuple(peers), 1))  # discovery: one job is enough
        adhoc_delay = min(ADHOC_MIN_DELAY << min(st.adhoc_attempt, 30), self.adhoc_max_delay)
        if (zero or now - st.adhoc_time > adhoc_delay) and responders:
            st.adhoc_time = now
            st.adhoc_attempt += 1
            requests.append((tuple(responders), to_fetch))
        return requests

    def received(self, queue, sender, count, now):
        st = state_of(queue, now)
        if sender not in st.responders:
            st.bcast_attempt = 0  # a new source: broadcasts may start over
        st.responders[sender] = now
        for _ in range(count):
            st.count_import(now)
        st.adhoc_attempt = 0

    def to_serve(self, queue, requester, count, now):
        if queue.fed is not None and queue.fed.import_rate(now) > 0:
            return 0  # importing this queue ourselves
        qlen = len(queue.jobs)
        give = count if qlen >= count * 2 else qlen // 2
        return max(give, 1)
