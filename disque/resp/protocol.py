"""The client-facing RESP protocol: parse, dispatch, write, park.

One ``dataReceived`` parses every complete request, runs them in order and
answers with a single ``transport.write``.  A command that blocks (GETJOB
with no job) parks the connection: later pipelined requests wait, in order,
until the node delivers the parked reply (``deliver``), as in Redis.

The transport is registered as its own producer, so a client that stops
reading its replies stops being read: its output cannot grow without bound.
"""

from collections import deque

from twisted.internet.protocol import Factory, Protocol

from ..commands import BLOCKED, ReplySlot, dispatch
from ..commands.context import REPLY_ON, REPLY_SKIP, REPLY_SKIP_NEXT
from .codec import ProtocolError, RequestParser

MAX_CLIENTS_ERROR = b"-ERR max number of clients reached\r\n"


class RespProtocol(Protocol):
    client = None
    parked = False
    closing = False
    input_error = None  # a protocol error waiting for the parked pipeline ahead of it

    def __init__(self, runtime):
        self.runtime = runtime
        self.parser = RequestParser()
        self.pending = deque()
        self.slots = None  # deque of replies (bytes | ReplySlot) held behind an unfilled slot

    # -- connection ------------------------------------------------------

    def connectionMade(self):
        rt = self.runtime
        ctx = rt.ctx
        if len(ctx.clients) >= ctx.config["maxclients"]:
            ctx.stats.rejected += 1
            self.transport.write(MAX_CLIENTS_ERROR)
            self.transport.loseConnection()
            self.closing = True
            return
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)  # as Redis: replies go out at once
        peer = self.transport.getPeer()
        host = self.transport.getHost()
        addr = b"%s:%d" % (getattr(peer, "host", "?").encode(), getattr(peer, "port", 0))
        laddr = b"%s:%d" % (getattr(host, "host", "?").encode(), getattr(host, "port", 0))
        rt.set_time()
        self.client = ctx.new_client(addr, self, laddr)
        try:
            self.transport.registerProducer(self.transport, True)
        except Exception:  # some test transports are not producers
            pass

    def connectionLost(self, reason=None):
        self.closing = True
        if self.client is not None:
            self.runtime.ctx.drop_client(self.client)
            self.client = None
            self.pending.clear()

    # -- input -----------------------------------------------------------

    def dataReceived(self, data):
        if self.closing or self.input_error is not None:
            return
        rt = self.runtime
        rt.ctx.stats.net_in += len(data)
        parser = self.parser
        error = None
        commands = []
        try:
            commands = parser.feed_parse(data)
            if commands and parser.failed():
                parser.parse()  # [] unless an error followed them: it raises
        except ProtocolError as e:
            error = e.args[0]
        self.client.qbuf = parser.pending()
        if self.pending or self.parked:
            self.pending.extend(commands)
            commands = ()
        rt.set_time()
        self.client.atime = rt.node.now // 1000  # CLIENT LIST idle=
        out = self._run(commands)
        if error is not None and (self.parked or self.pending):
            self.input_error = error  # answered in turn, by resume()
            error = None
        if error is not None:
            out.append(b"-ERR " + error + b"\r\n")
        if out:
            self._emit(out)
        if error is not None:
            self.closing = True
            self.transport.loseConnection()
        rt.after_batch()

    def _run(self, commands, out=None):
        """Execute ``commands`` until one parks the client; queue the rest."""
        if out is None:
            out = []
        rt = self.runtime
        ctx = rt.ctx
        node = ctx.node
        client = self.client
        it = iter(commands)
        for argv in it:
            if rt.paused_until and rt.clients_paused():
                self.pending.append(argv)
                self.pending.extend(it)
                rt.wait_unpause(self)
                break
            result = dispatch(ctx, client, argv)
            if node.ready:
                node.getjob.serve_ready()
            if result is BLOCKED:
                self.parked = True
                self.pending.extend(it)
                break
            mode = client.reply_mode
            if type(result) is ReplySlot and mode == REPLY_ON and self.slots is None:
                self.slots = deque()
            if mode == REPLY_ON:
                out.append(result)
            elif mode == REPLY_SKIP_NEXT:  # CLIENT REPLY SKIP itself: silent
                client.reply_mode = REPLY_SKIP
            elif mode == REPLY_SKIP:
                client.reply_mode = REPLY_ON
            if self.closing:
                break
        return out

    # -- output ----------------------------------------------------------

    def _write(self, data):
        self.runtime.ctx.stats.net_out += len(data)
        self.transport.write(data)

    def _emit(self, out):
        """Write ``out`` (one batch of replies), or queue it behind a reply
        slot still waiting to be filled."""
        if self.slots is None:
            self._write(b"".join(out))
        else:
            self.slots.extend(out)
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
            ready.append(item)
            slots.popleft()
        if not slots:
            self.slots = None
        if ready:
            self._write(b"".join(ready))

    def deliver(self, payload):
        """Write a reply produced outside this connection's request flow:
        a parked command's reply (then resume the pipeline) or a MONITOR
        line."""
        if self.closing or self.client is None:
            return
        if self.parked:
            self.parked = False
            out = [payload] if self.client.reply_mode == REPLY_ON else []
            if self.client.reply_mode == REPLY_SKIP:
                self.client.reply_mode = REPLY_ON
            self.resume(out)
        else:
            self._emit([payload])

    def resume(self, out=None):
        out = out if out is not None else []
        pending = self.pending
        self.pending = deque()
        self._run(pending, out)
        error = self.input_error
        if error is not None and not (self.parked or self.pending):
            out.append(b"-ERR " + error + b"\r\n")
        if out:
            self._emit(out)
        if error is not None and not (self.parked or self.pending):
            self.close()

    def close(self):
        self.closing = True
        self.transport.loseConnection()


class RespFactory(Factory):
    noisy = False

    def __init__(self, runtime):
        self.runtime = runtime

    def buildProtocol(self, addr):
        p = RespProtocol(self.runtime)
        p.factory = self
        return p
