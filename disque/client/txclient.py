"""The cluster-aware Twisted client, on txredisapi's protocol and
connection handling.

    client = DisqueClient(["10.0.0.1:7711", "10.0.0.2:7711"])
    job_id = yield client.add_job("orders", b"...", replicate=2)
    jobs = yield client.get_jobs("orders", timeout=1000)

Every method of :class:`~disque.client.commands.Commands` returns a
Deferred.  What the client does for the caller:

* **Discovery.** It connects to a node of the list given (the seeds), asks
  it HELLO, and from then on knows every node of the cluster and its
  priority.  HELLO is asked again every ``hello_interval`` seconds.
* **Choice.** It talks to one node at a time (the *current* node): the
  lowest priority value first, at random among equals.  When HELLO shows
  a better node than the current one (the current one is leaving, or
  failing), the next call goes to the better one.
* **Failover.** A call whose connection is lost, that gets no reply
  within ``reply_timeout``, or that is answered ``-LEAVING`` (or ADDJOB's
  ``-NOREPL`` because the node is leaving), runs again on
  the next node; nodes that failed are tried again after a backoff
  (0.1 s doubling to 5 s).  A call fails with
  :class:`~disque.client.errors.NoNodeAvailable` only when no node could
  run it for ``failover_timeout`` seconds, or at once when every node
  failed for a cause that lasts (``ClusterClient._gave_up``: a node that
  does not speak RESP, TLS that cannot connect).  A call that may have run on the
  lost node runs again elsewhere: at-least-once, like Disque itself (an
  ADDJOB given a ``dedup`` key adds its job once whatever happens).
* **Consumers follow producers.** When more than ``switch_share`` of the
  last ``switch_window`` jobs GETJOB received were created on one other
  node (job ID prefix), the client moves to that node (``None`` window
  turns it off).
* **Connections.** One connection per node carries the calls that get an
  answer at once (pipelined); a GETJOB that may wait has a connection of
  its own for its duration (kept for the next one).  Commands about a
  fetched :class:`~disque.client.job.Job` (ACK, NACK, WORKING, SHOW...)
  go first to the node that delivered it.

The connections themselves (one txredisapi connection, a node's set of
them, how one is opened) are in :mod:`.txconn`; the settings and the
consumer rule's state shared with the blocking client in :mod:`.cluster`.
This module stays over 400 lines on purpose: what is left is one state
machine, :class:`DisqueClient`'s fast path, full path, choice of node and
failover, whose every decision reads the same node table, current node and
retired flags; cut in two, each half would reach into the other's state.
"""

from typing import Callable, Dict, List, Optional

import txredisapi
from twisted.internet import defer, task
from twisted.python.failure import Failure

from ..io.logs import logger
from . import causes, errors
from .cluster import ClusterClient
from .commands import Call
from .job import Job
from .nodes import Address, Candidate
from .replies import Page
from .txconn import Conn, Node, cause_of, diagnose, dial, new_factory, response_error, unanswered

MAX_IDLE_BLOCKING = 8  # idle GETJOB connections kept per node

_Conn, _Node = Conn, Node  # (the names tests/protocol/test_client_failover.py imports)


class DisqueClient(ClusterClient):
    """A Twisted client for a Disque cluster (see the module docstring).

    The arguments are :class:`~disque.client.cluster.ClusterClient`'s
    (``password`` and ``username``, for a user of the nodes' ACL other
    than ``default``, are sent with AUTH on every connection:
    :mod:`~disque.client.credentials`), with ``reactor`` (a keyword; the
    global one by default)."""

    log = logger("disque.client")  # (namespace disque.client.txclient.DisqueClient)

    def __init__(self, *args, reactor=None, **settings):
        super().__init__(*args, **settings)
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self._nodes: Dict[Address, Node] = {}
        self._by_id: Dict[str, Node] = {}
        self._current: Optional[Node] = None
        self._choosing = defer.DeferredLock()
        self._closed = False
        self._hello_loop = task.LoopingCall(self._refresh)
        self._hello_loop.clock = reactor
        self._watchdog = task.LoopingCall(self._watch)
        self._watchdog.clock = reactor

    # -- life cycle --------------------------------------------------------------

    @defer.inlineCallbacks
    def connect(self):
        """Connect to a node now (calls connect by themselves when needed);
        fires with the client."""
        yield self._current_node(self.reactor.seconds() + self.failover_timeout)
        return self

    def disconnect(self):
        """Close every connection; calls made afterwards fail."""
        self._closed = True
        for loop in (self._hello_loop, self._watchdog):
            if loop.running:
                loop.stop()
        waits = []
        for node in self._nodes.values():
            for conn in node.conns():
                if not conn.factory.disconnectCalled:
                    waits.append(conn.factory.disconnect())
            node.shared, node.idle = None, []
        self._current = None
        return defer.gatherResults(waits, consumeErrors=True).addCallback(lambda _: None)

    @property
    def node_id(self) -> Optional[str]:
        """The ID of the current node (``None`` before the first connection)."""
        return self._current.id if self._current else None

    @property
    def node_address(self) -> Optional[Address]:
        return self._current.address if self._current else None

    # -- running a call -------------------------------------------------------------

    def _then(self, result, f):
        return result.addCallback(f)

    def _run(self, call: Call):
        """The fast path: a call answered at once, for the current node, on
        its open connection, sent straight away; its reply is shaped by
        ``_fast_reply``, and anything that needs a decision (a lost
        connection, -LEAVING) goes to :meth:`_execute`, the full path, which
        runs the call again.  Every other call takes the full path."""
        node = self._current
        if (node is None or call.blocking or call.pin is not None or node.retired
                or (call.prefer is not None and call.prefer != node.id)):
            return self._execute(call)
        conn = node.shared
        if conn is None or not conn.alive or self._closed:
            return self._execute(call)
        if conn.pending == 0:
            conn.progress = self.reactor.seconds()
        conn.pending += 1
        d = conn.execute(call.args)
        return d.addBoth(self._fast_reply, conn, node, call)

    def _fast_reply(self, reply, conn: Conn, node: Node, call: Call):
        conn.pending -= 1
        conn.progress = self.reactor.seconds()
        if node.retired and not node.busy and node is not self._current:
            node.close()  # the last reply a retired node owed
        if not isinstance(reply, Failure):
            return call.parse(reply, node.id)
        if reply.check(txredisapi.ResponseError):
            error = response_error(reply.value, node.addr)
            if not errors.means_leaving(error):
                raise error
            self._leaving(node)
        else:
            reply.trap(txredisapi.ConnectionError)
            conn.close()
            self._failed(node, reply.value)
        return self._execute(call)

    def _watch(self):
        """Close the connections that stopped answering (a paused or stalled
        node): their calls fail over."""
        now = self.reactor.seconds()
        for node in list(self._nodes.values()):
            conn = node.shared
            if conn is not None and conn.pending and now - conn.progress > self.reply_timeout:
                self.log.info("disque client: node {node} has not answered for {s:.1f} s", node=node,
                              s=now - conn.progress)
                conn.close()

    @defer.inlineCallbacks
    def _execute(self, call: Call):
        deadline = self.reactor.seconds() + self.failover_timeout
        prefer = call.prefer
        while True:
            if self._closed:
                raise errors.ConnectionError("the client is disconnected")
            node = yield self._node_for(call, prefer, deadline)
            try:
                conn = yield self._conn_for(node, call.blocking)
            except errors.AuthError:
                raise
            except Exception as e:
                self._failed(node, e, call)
                prefer = None
                continue
            node.inflight += 1
            try:
                d = conn.execute(call.args)
                timeout = call.reply_timeout(self.reply_timeout)
                if timeout is not None:
                    d.addTimeout(timeout, self.reactor)
                reply = yield d
            except txredisapi.ResponseError as e:
                error = response_error(e, node.addr)
                if errors.means_leaving(error) and call.pin is None:
                    self._leaving(node)
                    prefer = None
                    continue
                raise error
            except (txredisapi.ConnectionError, defer.TimeoutError) as e:
                conn.close()
                self._failed(node, e, call)
                prefer = None
                continue
            finally:
                node.inflight -= 1
                self._release(node, conn, call.blocking)
            result = call.parse(reply, node.id)
            if call.args[0] == "GETJOB" and result and node is self._current:
                self._observe(node, result)
            return result

    @defer.inlineCallbacks
    def _node_for(self, call: Call, prefer: Optional[str], deadline: float):
        if call.pin is not None:
            node = self._by_id.get(call.pin)
            if node is None or not self.topology.available(node.address, self.reactor.seconds()):
                raise errors.ConnectionError("node %s, which holds this scan's cursor, is not reachable"
                                             % call.pin[:8])
            return node
        if prefer is not None:
            node = self._by_id.get(prefer)
            if (node is not None and not node.retired
                    and self.topology.available(node.address, self.reactor.seconds())):
                return node
        node = yield self._current_node(deadline)
        return node

    @defer.inlineCallbacks
    def _current_node(self, deadline: float):
        node = self._current
        if node is not None and not node.retired:
            return node
        yield self._choosing.acquire()
        try:
            if self._current is None or self._current.retired:
                self._current = yield self._choose(deadline)
                if not self._hello_loop.running and self.hello_interval:
                    self._hello_loop.start(self.hello_interval, now=False)
                if not self._watchdog.running:
                    self._watchdog.start(max(0.05, self.reply_timeout / 4.0), now=False)
            return self._current
        finally:
            self._choosing.release()

    @defer.inlineCallbacks
    def _choose(self, deadline: float):
        """Connect to the best node that answers; retries the nodes that
        failed as their backoff ends, until ``deadline``."""
        while True:
            if self._closed:
                raise errors.ConnectionError("the client is disconnected")
            now = self.reactor.seconds()
            candidates = self.topology.plan(now, self.discover, self._target)
            self._target = None
            for candidate in candidates:
                node = self._node_at(candidate)
                node.retired = False
                try:
                    yield self._open_shared(node, with_hello=True)
                except errors.ACCESS_ERRORS:
                    raise
                except Exception as e:
                    self._failed(node, e)
                    continue
                self.log.debug("disque client: using node {node}", node=node)
                return node
            now = self.reactor.seconds()
            wake = self.topology.next_retry(now)
            error = self._gave_up(now, deadline)
            if error is not None:
                raise error
            yield task.deferLater(self.reactor, max(0.01, min(wake, deadline) - now), lambda: None)

    def _node_at(self, candidate: Candidate) -> Node:
        node = self._nodes.get(candidate.address)
        if node is None:
            node = self._nodes[candidate.address] = Node(candidate.host, candidate.port)
        if candidate.id:
            node.id = candidate.id
            self._by_id[candidate.id] = node
        return node

    @defer.inlineCallbacks
    def _open_shared(self, node: Node, with_hello: bool = False):
        if node.shared is not None and node.shared.alive and not with_hello:
            return node.shared
        if node.opening is not None:  # another call is opening it: share its result
            d = defer.Deferred()
            node.opening.append(d)
            conn = yield d
            return conn
        node.opening = waiters = []
        try:
            conn = node.shared if node.shared is not None and node.shared.alive else (yield self._connect(node))
            if with_hello:
                try:
                    yield self._hello(node, conn)
                except txredisapi.ResponseError as e:
                    conn.close()
                    raise response_error(e, node.addr)
                except Exception as e:
                    conn.close()
                    error = unanswered(conn.factory, cause_of(node.addr, e))
                    raise (yield diagnose(self.reactor, node, self.tls is not None, self.connect_timeout, error))
            node.shared = conn
            self.topology.succeeded(node.address)
        except Exception as e:
            node.opening = None
            for d in waiters:
                d.errback(e)
            raise
        node.opening = None
        for d in waiters:
            d.callback(conn)
        return conn

    @defer.inlineCallbacks
    def _conn_for(self, node: Node, blocking: bool):
        if not blocking:
            conn = yield self._open_shared(node)
            return conn
        while node.idle:
            conn = node.idle.pop()
            if conn.alive:
                return conn
        conn = yield self._connect(node)
        return conn

    def _release(self, node: Node, conn: Conn, blocking: bool):
        if blocking:
            if conn.alive and not node.retired and not self._closed and len(node.idle) < MAX_IDLE_BLOCKING:
                node.idle.append(conn)
            else:
                conn.close()
        if node.retired and not node.busy and node is not self._current:
            node.close()

    def _factory(self, node: Node) -> txredisapi.RedisFactory:
        """The txredisapi factory of one connection to ``node`` (its
        protocol sends the client's AUTH first)."""
        return new_factory(node, self.username, self.password)

    def _connect(self, node: Node):
        """A new txredisapi connection to ``node`` (AUTH done)."""
        return self._dial(self._factory(node), node)

    def _dial(self, factory: txredisapi.RedisFactory, node: Node):
        """Connect ``factory`` to ``node``; fires with the :class:`Conn`
        once it is ready (a refused AUTH raises :class:`AuthError`)."""
        return dial(self.reactor, factory, node, self.tls, self.connect_timeout, self.reply_timeout)

    # -- failures, leaving nodes, the consumer rule -----------------------------------

    def _failed(self, node: Node, error, call: Optional[Call] = None):
        error = cause_of(node.addr, error)
        text = errors.reason_of(error)
        until = self.topology.failed(node.address, self.reactor.seconds(), error)
        node.close()
        if self._current is node:
            self._current = None
        self.log.info("disque client: node {node} failed ({reason}); retry it in {delay:.1f} s",
                      node=node, reason=text, delay=until - self.reactor.seconds())
        if call is not None and call.pin is not None:
            raise errors.ConnectionError("node %s, which holds this scan's cursor, failed: %s"
                                         % (call.pin[:8], text))

    def _leaving(self, node: Node):
        self.log.info("disque client: node {node} is leaving the cluster; moving on", node=node)
        if node.id:
            self.topology.mark_leaving(node.id)
        self._retire(node)

    def _retire(self, node: Node):
        """Stop sending new calls to ``node``; its connections close once the
        calls in flight there are answered."""
        node.retired = True
        for conn in node.idle:
            conn.close()
        node.idle = []
        if self._current is node:
            self._current = None
        if not node.busy:
            node.close()

    def _observe(self, node: Node, jobs: List[Job]):
        info = self._follow_producers(node.id, (job.origin for job in jobs), self.reactor.seconds())
        if info is None:
            return
        self.log.info("disque client: most jobs received come from node {prefix}: moving there from {node}",
                      prefix=info.id[:8], node=node)
        self._retire(node)

    @defer.inlineCallbacks
    def _hello(self, node: Node, conn: Conn):
        """HELLO on ``conn``: learn ``node``'s ID and (with discovery) the
        cluster from the reply."""
        d = conn.execute(["HELLO"])
        d.addTimeout(self.reply_timeout, self.reactor)
        hello = causes.hello((yield d), node.addr, host=node.host)
        node.id = hello.node_id
        self._by_id[node.id] = node
        if self.discover:
            self.topology.learn(hello)

    @defer.inlineCallbacks
    def _refresh(self):
        """Ask the current node HELLO again; move on if it is no longer among
        the best (it is leaving, or failing)."""
        node = self._current
        if node is None or not self.discover or node.shared is None or not node.shared.alive:
            return
        try:
            yield self._hello(node, node.shared)
        except Exception as e:
            self.log.debug("disque client: HELLO to {node} failed: {e}", node=node, e=e)
            return
        if node is self._current and self.topology.outranked(node.id, self.reactor.seconds()):
            self.log.info("disque client: node {node} now has priority {p}: moving to a better node",
                          node=node, p=self.topology.priority(node.id))
            self._retire(node)

    # -- scans ---------------------------------------------------------------------

    def qscan(self, **options) -> "Scan":
        """QSCAN as a :class:`Scan` (options of :meth:`qscan_page`)."""
        return Scan(self.qscan_page, options)

    def jscan(self, **options) -> "Scan":
        """JSCAN as a :class:`Scan` (options of :meth:`jscan_page`)."""
        return Scan(self.jscan_page, options)


class Scan:
    """The pages of one QSCAN/JSCAN cursor, all from the node that answered
    the first page.  ``next()`` fires with the next page's items (and
    sets ``done`` after the last); ``collect()`` fires with every item."""

    def __init__(self, page: Callable, options: dict):
        self._page = page
        self._options = options
        self.cursor = 0
        self.node: Optional[str] = None
        self.done = False

    @defer.inlineCallbacks
    def next(self):
        if self.done:
            return []
        page: Page = yield self._page(self.cursor, node=self.node, **self._options)
        self.cursor, self.node = page.cursor, page.node
        self.done = page.cursor == 0
        return page.items

    @defer.inlineCallbacks
    def collect(self):
        items = []
        while not self.done:
            items.extend((yield self.next()))
        return items


__all__ = ["DisqueClient", "Scan"]
