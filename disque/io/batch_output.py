"""Output leaves at the end of a batch, straight to the socket.

Connections do not write to their transport as replies and bus frames are
made: they keep them (:class:`BatchOutput`) and join the ``pending_output``
list of the runtime's effects (:mod:`disque.node.effects`), which calls
their ``flush()`` once the batch is done.  Two things follow:

* **Order with the AOF.**  ``after_batch`` writes (and with ``appendfsync
  always``, fsyncs) the append only file *before* it flushes the
  connections, so no reply leaves before the records it acknowledges are
  written, as in the original (``beforeSleep`` flushes the AOF, then the
  clients' pending replies).
* **One send per connection per batch, without the writer round trip.**
  Twisted's ``transport.write`` only buffers: it registers the socket for
  writing (an ``epoll_ctl``), and the bytes leave on the next reactor turn
  (an ``epoll_wait``, ``doWrite``, a second ``epoll_ctl`` to unregister).
  :func:`write_now` sends at once when the transport holds nothing, and
  hands only what the kernel did not take to ``transport.write``.

The RESP protocol (:mod:`disque.resp.output_flow`) and the bus protocol
(:mod:`disque.bus.protocol`) both mix :class:`BatchOutput` in, so it lives
below both and imports nothing of the project.
"""

from twisted.internet import tcp

# Twisted's TCP transports, whose buffers write_now reads (any other
# transport, TLS or in-memory ones included, takes the ordinary path).
_DIRECT = (tcp.Server, tcp.Client)


class BatchOutput:
    """What a connection keeps until its batch ends (mixed into the RESP and
    bus protocols, which have ``runtime`` -- the NodeRuntime or its BusHub,
    both with ``effects`` -- and ``transport``).  Invariant:
    ``outbuf`` is None, or non-empty and the connection is in
    ``runtime.effects.pending_output`` or (``held``) in ``runtime.effects.held_output``
    exactly once."""

    outbuf = None
    held = False  # its output waits for the AOF (Effects.end_turn): hold() / release()
    _held_sum = (0, 0)  # (chunks, bytes) of outbuf summed by held_bytes() while held
    counted = None  # maxmemory-clients' last figure (disque.node.client_memory); None: not counted (bus links)

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.held = False
        self._held_sum = (0, 0)

    def held_bytes(self) -> int:
        """What the output held for the AOF holds (0 when none is held).
        Each chunk is summed once: a held ``outbuf`` only grows until its
        release."""
        out = self.outbuf
        if not self.held or out is None:
            return 0
        chunks, n = self._held_sum
        for i in range(chunks, len(out)):
            n += len(out[i])
        self._held_sum = (len(out), n)
        return n

    def keep(self, *chunks: bytes) -> None:
        """Keep ``chunks`` for the next :meth:`take_output`."""
        out = self.outbuf
        if out is None:
            self.outbuf = out = []
            self.runtime.effects.pending_output.append(self)
        out.extend(chunks)

    def take_output(self):
        """The bytes kept since the last call, joined, or None."""
        out = self.outbuf
        if out is None:
            return None
        self.outbuf = None
        return out[0] if len(out) == 1 else b"".join(out)


def write_now(transport, data: bytes) -> None:
    """Write ``data`` to ``transport``: straight to its socket when nothing
    waits in the transport's buffers (so order is kept), else, and for
    whatever the kernel does not take, through ``transport.write``.  Errors
    are left to Twisted: on any ``OSError`` (would block, connection lost)
    the data goes through ``transport.write``, whose ``doWrite`` finds and
    reports the lost connection as it always does."""
    if type(transport) in _DIRECT and transport.connected and not transport.disconnecting \
            and not transport._tempDataBuffer and transport.offset == len(transport.dataBuffer):
        try:
            sent = transport.socket.send(data)
        except OSError:
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)
