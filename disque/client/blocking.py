"""The blocking client: the same commands, node choice and failover as the
Twisted client, for scripts, threads and code without a reactor.

    client = BlockingClient(["10.0.0.1:7711", "10.0.0.2:7711"])
    job_id = client.add_job("orders", b"...", replicate=2)
    for job in client.get_jobs("orders", count=10, timeout=1000):
        ...
        client.ack(job)

One client is one thread's: it holds one connection per node it talks to
(the calls of a thread run one after the other, so a GETJOB that waits
does not hold anything else back).  Use one client per thread.

The failover rules are the Twisted client's (``disque.client.txclient``):
discovery with HELLO (again every ``hello_interval`` seconds, checked when
a call is made), the lowest priority first, another node on a lost
connection, a missing reply or ``-LEAVING``, backoff for failed nodes,
:class:`~disque.client.errors.NoNodeAvailable` after ``failover_timeout``
seconds without a node (sooner when no node can be used:
``ClusterClient._gave_up``), and the consumer rule.
"""

import time
from typing import Dict, Iterator, Optional

from . import causes, errors
from .cluster import ClusterClient
from .commands import Call
from .connection import Connection
from .nodes import Address


class BlockingClient(ClusterClient):
    """See the module docstring; the arguments are the Twisted client's
    (:class:`~disque.client.cluster.ClusterClient`; ``username`` and
    ``password`` log every connection in), with ``clock`` and ``sleep``
    (keywords) in place of its reactor."""

    def __init__(self, *args, clock=time.monotonic, sleep=time.sleep, **settings):
        super().__init__(*args, **settings)
        self.clock, self.sleep = clock, sleep
        self._conns: Dict[Address, Connection] = {}
        self._ids: Dict[Address, str] = {}
        self._current: Optional[Address] = None
        self._hello_at = 0.0

    # -- life cycle --------------------------------------------------------------

    def connect(self) -> "BlockingClient":
        self._current_node(self.clock() + self.failover_timeout)
        return self

    def close(self):
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._current = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def node_id(self) -> Optional[str]:
        return self._ids.get(self._current) if self._current else None

    @property
    def node_address(self) -> Optional[Address]:
        return self._current

    # -- running a call --------------------------------------------------------------

    def _run(self, call: Call):
        deadline = self.clock() + self.failover_timeout
        prefer = call.prefer
        while True:
            address = self._address_for(call, prefer, deadline)
            prefer = None
            conn = self._conns.get(address)
            try:
                if conn is None:
                    conn = self._conns[address] = self._open(address)
                conn.settimeout(call.reply_timeout(self.reply_timeout))
                reply = conn.call(*call.args)
            except (errors.Leaving, errors.NoReplication) as e:
                if call.pin is not None or not errors.means_leaving(e):
                    raise
                node_id = self._ids.get(address)
                if node_id:
                    self.topology.mark_leaving(node_id)
                self._drop(address)
                continue
            except errors.ConnectionError as e:
                self._failed(address, e)
                if call.pin is not None:
                    raise errors.ConnectionError("node %s, which holds this scan's cursor, failed: %s"
                                                 % (call.pin[:8], e)) from None
                continue
            node_id = self._ids.get(address)
            result = call.parse(reply, node_id)
            if call.args[0] == "GETJOB" and result and address == self._current:
                self._observe(address, result)
            self._maybe_refresh()
            return result

    def _address_for(self, call: Call, prefer: Optional[str], deadline: float) -> Address:
        if call.pin is not None:
            for address, node_id in self._ids.items():
                if node_id == call.pin and address in self._conns:
                    return address
            raise errors.ConnectionError("node %s, which holds this scan's cursor, is not connected" % call.pin[:8])
        if prefer is not None:
            for address, node_id in self._ids.items():
                if node_id == prefer and address in self._conns:
                    return address
        return self._current_node(deadline)

    def _current_node(self, deadline: float) -> Address:
        if self._current is not None:
            return self._current
        while True:
            now = self.clock()
            candidates = self.topology.plan(now, self.discover, self._target)
            self._target = None
            for candidate in candidates:
                address = candidate.address
                try:
                    conn = self._conns.get(address) or self._open(address)
                    self._conns[address] = conn
                    conn.settimeout(self.reply_timeout)
                    self._learn(address, conn.opening_call("HELLO"))
                except errors.ConnectionError as e:  # AuthError, NoPermission are not: they go up at once
                    self._failed(address, e)
                    continue
                self.topology.succeeded(address)
                self._current = address
                return address
            now = self.clock()
            wake = self.topology.next_retry(now)
            error = self._gave_up(now, deadline)
            if error is not None:
                raise error
            self.sleep(max(0.01, min(wake, deadline) - now))

    def _open(self, address: Address) -> Connection:
        return Connection(address[0], address[1], self.password, timeout=self.reply_timeout,
                          tls=self.tls, connect_timeout=self.connect_timeout, username=self.username)

    def _learn(self, address: Address, reply):
        hello = causes.hello(reply, errors.node_address(*address), host=address[0])
        self._ids[address] = hello.node_id
        if self.discover:
            self.topology.learn(hello)
        self._hello_at = self.clock()

    def _drop(self, address: Address):
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()
        if self._current == address:
            self._current = None

    def _failed(self, address: Address, error):
        self.topology.failed(address, self.clock(), error)
        self._drop(address)

    def _observe(self, address: Address, jobs):
        if self._follow_producers(self._ids.get(address), (job.origin for job in jobs), self.clock()) is not None:
            self._drop(address)

    def _maybe_refresh(self):
        """HELLO again when ``hello_interval`` passed; leave a node that
        another one outranks now."""
        address = self._current
        if address is None or not self.discover or self.clock() - self._hello_at < self.hello_interval:
            return
        try:
            self._learn(address, self._conns[address].call("HELLO"))
        except (errors.DisqueError, KeyError):
            return
        if self.topology.outranked(self._ids.get(address), self.clock()):
            self._drop(address)

    # -- scans ---------------------------------------------------------------------

    def qscan(self, **options) -> Iterator[str]:
        """Every queue name QSCAN gives (options of :meth:`qscan_page`)."""
        return self._scan(self.qscan_page, options)

    def jscan(self, **options) -> Iterator:
        """Every job JSCAN gives (options of :meth:`jscan_page`)."""
        return self._scan(self.jscan_page, options)

    def _scan(self, page_of, options):
        cursor, node = 0, None
        while True:
            page = page_of(cursor, node=node, **options)
            yield from page.items
            cursor, node = page.cursor, page.node
            if cursor == 0:
                return

