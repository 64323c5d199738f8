"""An eager federation policy for disque: a third-party-style example.

Deliberately different from ``default``: no exponential back-off and no
memory of sources.  While consumers wait, ask *every* reachable peer, at
most every ``interval`` ms (100 by default); and when asked, give at most
half of the queue (rounded up), so a node never strips its own consumers.
Good for small clusters with bursty cross-node traffic; chatty on big ones.

Select it with ``federation-policy eager`` (or ``eager:interval=50``); the
factory that makes it is in this package's dropin,
``twisted/plugins/eager_federation_plugin.py``.
"""

from zope.interface import implementer

from disque.interfaces import IFederationPolicy, IFederationState


@implementer(IFederationState)
class EagerState:
    def __init__(self):
        self.last_ask = None
        self.imported = []  # (ms, count, sender)

    def sources(self):
        return tuple(dict.fromkeys(sender for _, _, sender in self.imported))

    def import_rate(self, now):
        return sum(n for t, n, _ in self.imported if now - t < 1000)


@implementer(IFederationPolicy)
class EagerPolicy:
    def __init__(self, interval=100):
        self.interval = interval

    def wanted(self, queue, now, reason, peers, waiting):
        st = queue.fed if queue.fed is not None else EagerState()
        queue.fed = st
        if st.last_ask is not None and now - st.last_ask < self.interval:
            return ()
        st.last_ask = now
        return [(tuple(peers), max(1, waiting))]

    def received(self, queue, sender, count, now):
        st = queue.fed if queue.fed is not None else EagerState()
        queue.fed = st
        st.imported = [e for e in st.imported if now - e[0] < 1000] + [(now, count, sender)]

    def to_serve(self, queue, requester, count, now):
        return min(count, (len(queue.jobs) + 1) // 2)
