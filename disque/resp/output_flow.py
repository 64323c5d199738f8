"""The output side of a client connection: flow control, output limits,
replies in order behind reply slots, closing once the replies are out.

:class:`OutputFlow` is the half of :class:`~disque.resp.protocol.RespProtocol`
that decides what leaves and when; the protocol (the other half) parses,
runs and parks.  Split along that seam, the request path's hot calls
(``_emit``, ``_write``, ``flush``) stay plain method calls of one class.

The protocol is the streaming producer of its transport: when the
transport's buffer is full (the client does not read its replies) the
connection stops being read, so requests cannot pile up replies.  Output
that comes anyway (MONITOR lines, parked replies) is what
``client-output-buffer-limit normal <hard> <soft> <seconds>`` bounds, as in
the original: the bytes written while the transport is full are counted
(Twisted's own 64 KB buffer comes before them, as the kernel's socket buffer
comes before the original's reply list), and the client is dropped at once
when they exceed the hard limit, or when they stay above the soft limit for
more than the soft seconds.  0 disables a limit.  The replies a batch makes
count too, as they are made (the protocol's ``_run``).

A batch stops once its replies pass :data:`BATCH_OUTPUT` bytes
(``held_back``); the requests left run, as a batch of their own, once the
replies are written and the transport has room -- at once if the client
reads, else when it drains.

A :class:`~disque.contract.ReplySlot` keeps its place: replies made
after it wait in ``slots`` until it is filled, then leave together.

Invariants: replies leave in the order of their requests; one write per
batch (:mod:`disque.io.batch_output`); ``backlog`` is None exactly while the
transport has room.  The host class provides ``runtime`` (an
``IClientRuntime``), ``transport``, ``client``, ``closing``, ``resume()``
(run the requests waiting) and ``abort()`` (close at once).
"""

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from ..io.batch_output import BatchOutput, write_now
from ..io.logs import logger
from ..contract import ReplySlot

log = logger("disque.clients")

#: Bytes of replies after which a batch stops running a client's requests
#: until they are written.
BATCH_OUTPUT = 1024 * 1024


@implementer(IPushProducer)
class OutputFlow(BatchOutput):
    """Flow control, output limits and reply order (see the module
    docstring), mixed into the RESP protocol."""

    backlog = None  # bytes written since the transport said it is full; None: it is not
    over_soft_since = None  # node time (ms) the backlog went above the soft limit
    held_back = False  # a batch stopped at BATCH_OUTPUT: the pending requests go on once written
    slots = None  # deque of replies (bytes | ReplySlot) held behind an unfilled slot
    slotted = 0  # bytes of replies queued behind an unfilled reply slot
    _go_on_call = None
    lose_after_flush = False  # closing: the transport closes once this batch's replies are written
    producing = False  # registered as the transport's producer (see close)

    def start_producing(self):
        """Register as the transport's (push) producer: it pauses us when
        its buffer is full."""
        self.transport.registerProducer(self, True)
        self.producing = True

    def close(self):
        """Close once what was written is sent.  Twisted's loseConnection
        waits for a registered producer: TCP for one it has paused (its
        buffer was full), TLS for any (its close_notify is not sent until
        the producer goes): with us still registered, a close decided while
        replies wait, or any close under TLS, would never happen.  Nothing
        more is produced: done.  The replies this batch kept leave first
        (``flush`` then closes): TLS drops what is written after
        loseConnection (TCP sends it)."""
        self.closing = True
        self._unregister()
        if self.outbuf is not None and not self.held:
            self.lose_after_flush = True
        else:
            self.transport.loseConnection()

    def _unregister(self):
        """No longer the transport's producer (see close).  Tracked here:
        under TLS the transport's producer is not this protocol but the TLS
        layer's wrapper of it."""
        if self.producing:
            self.producing = False
            self.transport.unregisterProducer()

    # IPushProducer: the transport's buffer is full / has drained.

    def pauseProducing(self):
        # Twisted calls this at every write while its buffer is full: the
        # count starts at the first call only.
        self.transport.pauseProducing()  # stop reading requests
        if self.backlog is None:
            self.backlog = 0

    def resumeProducing(self):
        self.backlog = self.over_soft_since = None
        self.transport.resumeProducing()
        self._count_memory()
        if self.held_back:
            self._schedule_go_on()

    def stopProducing(self):
        pass  # the connection is gone: connectionLost cleans up

    def _write(self, data):
        """Keep ``data`` for :meth:`flush`, which the runtime calls when the
        batch is done (:mod:`disque.io.batch_output`)."""
        runtime = self.runtime
        runtime.ctx.stats.net_out += len(data)
        self.client.atime = runtime.now_ms() // 1000  # a reply is activity too (timeout, CLIENT LIST idle=)
        self.keep(data)

    def flush(self):
        """Send what this batch wrote, in one write."""
        data = self.take_output()
        if data is None:
            return
        write_now(self.transport, data)
        if self.lose_after_flush:  # the protocol's close() waited for these replies
            self.transport.loseConnection()
            return
        if self.backlog is not None:
            self.backlog += len(data)
            self._check_output_limits()
        elif self.held_back:  # written, and the transport has room
            self._schedule_go_on()

    def _schedule_go_on(self):
        if self._go_on_call is None and not self.closing:
            self._go_on_call = self.runtime.reactor.callLater(0, self._go_on)

    def _go_on(self):
        """Run the requests a batch held back (BATCH_OUTPUT), as a batch of
        their own, unless the transport filled up again meanwhile."""
        self._go_on_call = None
        if self.closing or not self.held_back or self.backlog is not None:
            return
        self.held_back = False
        runtime = self.runtime
        runtime.set_time()
        self.resume()
        runtime.after_batch()

    def _check_output_limits(self):
        hard, soft, seconds = self.runtime.output_limits
        now = self.runtime.now_ms()
        if soft and self.backlog > soft:
            if self.over_soft_since is None:
                self.over_soft_since = now
        else:
            self.over_soft_since = None
        over_soft = self.over_soft_since is not None and now - self.over_soft_since > seconds * 1000
        if (hard and self.backlog > hard) or over_soft:
            self._output_limit_reached(self.backlog)

    def _output_limit_reached(self, waiting):
        log.warn("Client {addr} closed for overcoming of output buffer limits ({n} bytes waiting)",
                 addr=self.client.addr.decode(), n=waiting)
        self.abort()

    def _count_memory(self):
        runtime = self.runtime
        if runtime.counting_clients:
            runtime.client_memory.report(self)

    def _emit(self, out):
        """Write ``out`` (one batch of replies), or queue it behind a reply
        slot still waiting to be filled."""
        if self.slots is None:
            self._write(b"".join(out))
        else:
            self.slots.extend(out)
            self.slotted += sum(len(item) for item in out if type(item) is bytes)
            self.slot_filled()

    def slot_filled(self):
        """Write every reply now ready at the head of the slot queue."""
        slots = self.slots
        if slots is None or self.closing:
            return
        ready = []
        while slots:
            item = slots[0]
            if type(item) is ReplySlot:
                if item.payload is None:
                    break
                item = item.payload
            else:
                self.slotted -= len(item)
            ready.append(item)
            slots.popleft()
        if not slots:
            self.slots = None
        if ready:
            self._write(b"".join(ready))
