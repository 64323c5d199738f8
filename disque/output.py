"""Output leaves at the end of a batch, straight to the socket.

Connections do not write to their transport as replies and bus frames are
made: they keep them (:class:`BatchOutput`) and join the runtime's ``pending_output``
list, and :meth:`disque.service.NodeRuntime.after_batch` calls their
``flush()`` once the batch is done.  Two things follow:

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
"""

from twisted.internet import tcp

# Twisted's TCP transports, whose buffers write_now reads (any other
# transport, TLS or in-memory ones included, takes the ordinary path).
_DIRECT = (tcp.Server, tcp.Client)


class BatchOutput:
    """What a connection keeps until its batch ends (mixed into the RESP and
    bus protocols, which have ``runtime`` and ``transport``).  Invariant:
    ``outbuf`` is None, or non-empty and the connection is in
    ``runtime.pending_output`` exactly once."""

    outbuf = None

    def keep(self, *chunks: bytes) -> None:
        """Keep ``chunks`` for the next :meth:`take_output`."""
        out = self.outbuf
        if out is None:
            self.outbuf = out = []
            self.runtime.pending_output.append(self)
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
