"""``maxmemory-clients``: what the client connections hold together, and
closing the biggest of them when it is too much (Redis 7's client eviction).

``maxmemory`` bounds the jobs; this bounds the clients as a whole, which
``client-query-buffer-limit`` and ``client-output-buffer-limit`` only bound
one at a time.  What a connection holds is what
:meth:`disque.resp.protocol.RespProtocol.memory` reports: its unparsed
bytes and the arguments of an incomplete request, the requests waiting to
run, the replies queued behind one still being made (a synchronous ADDJOB
waiting for its copies, a failed AUTH answered late), the output kept while the AOF cannot take the turn's records
(``held_output`` of :class:`disque.node.effects.Effects`), and the output
written while its transport is full.  MONITOR clients count like any
other; only a client that sent ``CLIENT NO-EVICT on`` is never closed.

The limit is a number of bytes or a share of ``maxmemory`` (``10%``), 0
for none (the default); below 128 KB it counts as 128 KB, as in Redis, so
that a bad setting cannot leave no room for any client.

Cost: nothing is counted while the limit is 0 (the request path only reads
the limit).  With a limit, a connection reports its figure when it changes
-- after a read, after its output leaves (or is held), when its transport
drains, when a parked command resumes -- and the tracker keeps the running
total, so the check at the end of each turn (:meth:`check`) is one
comparison; the biggest clients are looked for only when it fails.

Invariants, while the limit is not 0:

* ``total`` is the sum of ``counted`` over the connections still tracked:
  each connection's figure at its last report.  A connection leaves once
  (closed by its peer, or evicted) and its figure leaves with it; a closing
  connection reports nothing more.
* after :meth:`check`, ``total <= limit``; or a pass closed every client
  it could (those left are NO-EVICT) and the total has not grown past what
  it was then: the clients are looked at again as soon as it does, not at
  every turn.

While the limit is 0, ``total`` is 0 and no connection is counted; setting
one counts every connection at once.
"""

from ..config import Share
from ..io.log_limit import LogLimit
from ..io.logs import logger

log = logger("disque.clients")

#: The smallest limit, as Redis (getClientEvictionLimit).
MIN_LIMIT = 128 * 1024
#: At most one log line per this many seconds about evicted clients.
LOG_EVERY = 1.0


def effective_limit(setting, maxmemory: int) -> int:
    """The limit in bytes for ``maxmemory-clients`` ``setting`` (bytes, or
    a :class:`disque.config.Share` of ``maxmemory``): 0 for none, else at
    least :data:`MIN_LIMIT`."""
    limit = maxmemory * setting.percent // 100 if isinstance(setting, Share) else setting
    return max(limit, MIN_LIMIT) if limit > 0 else 0


class ClientMemory:
    """The running total of what the clients hold, and the evictions.

    ``clients`` is the node's table of clients (id ->
    :class:`disque.commands.context.ClientState`), whose ``conn`` is
    counted (it has ``memory()``, ``counted``, ``closing`` and
    ``abort()``); ``stats`` has the ``evicted_clients`` counter (INFO,
    /metrics); ``clock()`` is in seconds."""

    def __init__(self, clients, stats, clock):
        self._clients = clients
        self._stats = stats
        self.limit = 0
        self.total = 0
        self._floor = 0  # the total after a pass that could not get under the limit
        self._log_limit = LogLimit(clock, window=LOG_EVERY, max_keys=1)

    def set_limit(self, limit: int) -> None:
        """Start, change or stop counting (see the module docstring)."""
        was, self.limit = self.limit, limit
        if not limit:
            for client in self._clients.values():
                client.conn.counted = 0
            self.total = 0
        elif not was:
            total = 0
            for client in self._clients.values():
                conn = client.conn
                if not conn.closing:
                    conn.counted = conn.memory()
                    total += conn.counted
            self.total = total
        self._floor = 0

    def report(self, conn) -> None:
        """``conn``'s figure may have changed (only called with a limit)."""
        if not conn.closing:
            size = conn.memory()
            self.total += size - conn.counted
            conn.counted = size

    def report_all(self, conns) -> None:
        """Those of ``conns`` that are client connections (cluster bus
        links output the same way) may have changed."""
        for conn in conns:
            if conn.counted is not None:
                self.report(conn)

    def forget(self, conn) -> None:
        """``conn`` is gone: its figure leaves the total."""
        self.total -= conn.counted
        conn.counted = 0

    def check(self) -> int:
        """Close the biggest clients until the total is back under the
        limit; returns how many were closed."""
        total = self.total
        if total <= self.limit:
            return 0
        if total <= self._floor:
            self._floor = total  # follows the total down: the next growth looks again
            return 0
        biggest = sorted((c for c in self._clients.values() if c.conn.counted and not c.no_evict),
                         key=_counted, reverse=True)
        closed = 0
        for client in biggest:
            if self.total <= self.limit:
                break
            conn = client.conn
            size = conn.counted
            self.forget(conn)
            conn.abort()
            closed += 1
            self._logged(client, size)
        self._stats.evicted_clients += closed
        self._floor = self.total
        return closed

    def _logged(self, client, size: int) -> None:
        """A line a second at most, saying how many it folds."""
        folded = self._log_limit.admit("evicted")
        if folded is None:
            return
        more = " (%d more evicted since the last line)" % folded if folded else ""
        log.warn("Evicting client {addr}: it holds {size} bytes and all clients together more than "
                 "maxmemory-clients ({limit} bytes){more}", addr=client.addr.decode(errors="replace"),
                 size=size, limit=self.limit, more=more)


def _counted(client) -> int:
    return client.conn.counted
