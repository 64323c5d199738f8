"""The client-facing RESP protocol: parse, dispatch, write, park.

One ``dataReceived`` parses every complete request, runs them in order and
answers with a single write when the batch is done (:mod:`disque.io.batch_output`:
after the AOF, straight to the socket).  A command that blocks (GETJOB
with no job) parks the connection: later pipelined requests wait, in order,
until the node delivers the parked reply (``deliver``), as in Redis.

What leaves and when -- flow control (the protocol is its transport's
streaming producer), ``client-output-buffer-limit``, the order of replies
behind reply slots -- is the other half of the class,
:class:`disque.resp.output_flow.OutputFlow`.  The replies a batch makes
count against the hard output limit as they are made: a pipeline of
requests for big replies is dropped once the hard limit is passed, without
making the rest of them.  Requests run through the runtime's one front
door (``runtime.run_command``, :mod:`disque.commands.dispatcher`), and
their answers follow :mod:`disque.contract`.

One read can hold a thousand requests, each asking for a big reply (SHOW
of a large job): a batch stops once its replies pass ``BATCH_OUTPUT``
bytes, and the requests left wait (as behind a parked command) until the
replies are written and the transport has room -- at once if the client
reads, else when it drains.  So even without limits, a client that does not
read holds at most about ``BATCH_OUTPUT`` plus one reply of the node's
memory in replies to its requests.

Input is bounded the same way: ``client-query-buffer-limit`` bounds what a
client's requests hold before they run -- the parser's unparsed bytes and
the arguments of an incomplete request (:meth:`RequestParser.held`) plus
the requests waiting behind a parked command -- and a client past it is
closed at once, with a log line, as in the original.
What a connection holds in all (:meth:`RespProtocol.memory`) is what
``maxmemory-clients`` adds up over every client (:mod:`disque.node.client_memory`).
``proto-max-bulk-len`` is the parser's bulk limit (``-ERR Protocol error:
invalid bulk length``).

Connection policies read their directive when they apply, so CONFIG SET
takes effect for the next connection (``maxclients``, ``tcp-keepalive``) or
the next write (``client-output-buffer-limit``): ``maxclients`` refuses a
connection beyond the limit, ``protected-mode`` one that is not local while
the default user has no password (:mod:`disque.access.protection`: ``-DENIED``,
checked here once, never per request), ``tcp-keepalive N`` turns on TCP keepalives
(first probe after N s idle, then every N/3 s, 3 probes: the original's
settings), and :meth:`RespProtocol.idle` is what ``timeout`` asks
(:mod:`disque.node.timers`).
"""

import socket
from collections import deque
from itertools import islice

from twisted.internet.protocol import Factory, Protocol
from twisted.protocols.policies import ProtocolWrapper

from ..access.protection import DENIED, DENIED_REASON, is_local, protected
from ..io.logs import logger
from .codec import ARG_OVERHEAD, ProtocolError, RequestParser
from ..contract import BLOCKED, REPLY_ON, REPLY_SKIP, REPLY_SKIP_NEXT, ReplySlot
from .output_flow import BATCH_OUTPUT, OutputFlow

log = logger("disque.clients")

MAX_CLIENTS_ERROR = b"-ERR max number of clients reached\r\n"


def request_size(commands) -> int:
    """What parsed requests hold, counted as :meth:`RequestParser.held`
    counts an incomplete one."""
    return sum(sum(map(len, argv)) + ARG_OVERHEAD * len(argv) for argv in commands)


def common_name(cert) -> str:
    """The subject CN of a pyOpenSSL certificate ("" if none)."""
    from cryptography.x509.oid import NameOID

    names = cert.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def set_keepalive(transport, seconds: int) -> None:
    """SO_KEEPALIVE, and where the system allows, the first probe after
    ``seconds`` idle, then every seconds/3, giving up after 3."""
    transport.setTcpKeepAlive(1)
    while isinstance(transport, ProtocolWrapper):  # TLS: getHandle() is the OpenSSL connection
        transport = transport.transport
    sock = transport.getHandle()
    for option, value in (("TCP_KEEPIDLE", seconds), ("TCP_KEEPINTVL", max(seconds // 3, 1)),
                          ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class RespProtocol(OutputFlow, Protocol):
    """One client connection: its requests parsed, run through the front
    door in order, parked behind a blocked command; its output is
    :class:`~disque.resp.output_flow.OutputFlow`'s."""

    client = None
    parked = False
    closing = False
    input_error = None  # a protocol error waiting for the parked pipeline ahead of it
    queued = 0  # request_size(self.pending)
    cert_user_pending = False  # tls-auth-clients-user cn: the certificate names the user (first read)
    counted = 0  # what maxmemory-clients last counted for this connection (disque.node.client_memory)

    def __init__(self, runtime):
        self.runtime = runtime
        self.parser = RequestParser(max_bulk_len=runtime.max_bulk_len)
        self.pending = deque()
        self.slots = None  # OutputFlow's: replies held behind an unfilled reply slot

    # -- connection ------------------------------------------------------

    def connectionMade(self):
        runtime = self.runtime
        ctx = runtime.ctx
        if len(ctx.clients) >= ctx.config["maxclients"]:
            ctx.stats.rejected += 1
            self.transport.write(MAX_CLIENTS_ERROR)
            self.transport.loseConnection()
            self.closing = True
            return
        peer = self.transport.getPeer()
        local = is_local(peer)
        if not local and protected(ctx):
            self._deny(peer)
            return
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)  # as Redis: replies go out at once
            keepalive = ctx.config["tcp-keepalive"]
            if keepalive:
                set_keepalive(self.transport, keepalive)
        host = self.transport.getHost()
        addr = b"%s:%d" % (getattr(peer, "host", "?").encode(), getattr(peer, "port", 0))
        laddr = b"%s:%d" % (getattr(host, "host", "?").encode(), getattr(host, "port", 0))
        runtime.set_time()
        self.client = ctx.new_client(addr, self, laddr)
        self.client.local = local
        self.cert_user_pending = ctx.config["tls-auth-clients-user"] == "cn" and \
            hasattr(self.transport, "getPeerCertificate")
        self.start_producing()

    def _deny(self, peer):
        """Protected mode: tell the client why, close (as the original
        refuses a client beyond maxclients: counted, never a client)."""
        stats = self.runtime.ctx.stats
        stats.connections += 1
        stats.rejected += 1
        self.runtime.failed_auth.denied(getattr(peer, "host", "?"), DENIED_REASON)
        self.transport.write(DENIED)
        self.transport.loseConnection()
        self.closing = True

    def connectionLost(self, reason=None):
        self.closing = True
        self.runtime.client_memory.forget(self)
        if self._go_on_call is not None and self._go_on_call.active():
            self._go_on_call.cancel()
        self._unregister()  # leave no transport <-> protocol cycle behind
        if self.client is not None:
            self.runtime.ctx.drop_client(self.client)
            self.client = None
            self.pending.clear()

    # -- input -----------------------------------------------------------

    def dataReceived(self, data):
        if self.closing or self.input_error is not None:
            return
        runtime = self.runtime
        runtime.ctx.stats.net_in += len(data)
        parser = self.parser
        if self.cert_user_pending:
            self._user_from_certificate()
        if not self.client.authenticated or parser.preauth:
            self._follow_auth()
        commands, error = self._parse(data)
        self.client.qbuf = parser.pending()
        if self.pending or self.parked:
            self.pending.extend(commands)
            self.queued += request_size(commands)
            commands = ()
        if parser.held() + self.queued > runtime.query_buffer_limit:
            self._query_limit_reached()
            return
        self.client.atime = runtime.set_time() // 1000  # CLIENT LIST idle=
        out = self._run(commands)
        if parser.preauth_refused is not None and error is None:
            error = self._after_preauth_stop(out)
        if commands and self.pending:  # parked with requests of this read behind it
            self.queued = request_size(self.pending)
        if error is not None and (self.parked or self.pending):
            self.input_error = error  # answered in turn, by resume()
            error = None
        if error is not None:
            out.append(b"-ERR " + error + b"\r\n")
        if out:
            self._emit(out)
        if error is not None:
            self.close()
        if runtime.counting_clients:
            runtime.client_memory.report(self)
        runtime.after_batch()

    def _parse(self, data=None):
        """(the complete requests now buffered, with ``data`` fed first,
        and the protocol error after them or None)."""
        parser = self.parser
        commands = []
        try:
            commands = parser.parse() if data is None else parser.feed_parse(data)
            if commands and parser.failed():
                parser.parse()  # [] unless an error followed them: it raises
        except ProtocolError as e:
            return commands, e.args[0]
        return commands, None

    def _follow_auth(self):
        """The parser applies Redis' limits for clients that have not
        authenticated (disque.resp.codec) exactly while this one must."""
        want = not self.client.authenticated and self.runtime.ctx.acl.auth_required
        if self.parser.preauth != want:
            self.parser.set_preauth(want)

    def _user_from_certificate(self):
        """``tls-auth-clients-user cn``: a TLS client whose certificate's
        CN names an enabled user runs as that user, authenticated, from
        its first request (the handshake is over once data arrives).  A
        CN naming no such user changes nothing: the client authenticates
        as any other."""
        self.cert_user_pending = False
        cert = self.transport.getPeerCertificate() if hasattr(self.transport, "getPeerCertificate") else None
        if cert is None:
            return
        cn = common_name(cert)
        user = self.runtime.ctx.acl.users.get(cn.encode("utf-8", "surrogateescape")) if cn else None
        if user is not None and user.enabled:
            self.client.user = user
            self.client.authenticated = True
        elif cn:
            log.info("TLS client {addr}: certificate CN {cn!r} names no enabled user",
                     addr=self.client.addr.decode(errors="replace"), cn=cn)

    def _after_preauth_stop(self, out):
        """The parser stopped at a request too big for a client that has not
        authenticated, after the requests before it ran.  If one of them
        was a good AUTH, parse on and run (or queue) the rest; return the
        error to answer, if any."""
        parser = self.parser
        while parser.preauth_refused is not None:
            self._follow_auth()
            if parser.preauth_refused is not None:
                return parser.preauth_refused
            more, error = self._parse()
            if self.pending or self.parked:
                self.pending.extend(more)
            else:
                self._run(more, out)
            if error is not None:
                return error
        return None

    def _query_limit_reached(self):
        """Close this client at once: its requests hold more than
        ``client-query-buffer-limit`` (nothing of this read runs)."""
        log.warn("Closing client that reached max query buffer length: addr={addr} qbuf={qbuf} "
                 "held={held} (qbuf initial bytes: {head!r})", addr=self.client.addr.decode(),
                 qbuf=self.parser.pending(), held=self.parser.held() + self.queued, head=self.parser.peek(64))
        self.abort()

    def abort(self):
        """Close at once, dropping what waits for this client (requests,
        replies): they may never be read.  For the client limits."""
        self.closing = True
        self.pending.clear()
        self.queued = 0
        self.transport.abortConnection()

    def _run(self, commands, out=None):
        """Execute ``commands`` until one parks the client; queue the rest.
        With a hard output limit, the replies made count against it as they
        are made (see the module docstring)."""
        if out is None:
            out = []
        runtime = self.runtime
        hard = runtime.output_limits[0]
        room = hard - (self.backlog or 0) if hard else BATCH_OUTPUT  # before the limit
        stop_at = min(room, BATCH_OUTPUT)
        client = self.client
        run_command = runtime.run_command  # the one front door: checks, MONITOR, stats, blocked clients served
        it = iter(commands)
        made = 0
        with runtime.run_of_commands:  # one clock read per command (disque.commands.dispatcher)
            for argv in it:
                if runtime.paused_until and runtime.clients_paused():
                    self.pending.append(argv)
                    self.pending.extend(it)
                    runtime.wait_unpause(self)
                    break
                result = run_command(client, argv)
                if result is BLOCKED:
                    self.parked = True
                    self.pending.extend(it)
                    break
                mode = client.reply_mode
                if type(result) is ReplySlot and mode == REPLY_ON and self.slots is None:
                    self.slots = deque()
                if mode == REPLY_ON:
                    out.append(result)
                    if type(result) is bytes:
                        made += len(result)
                        if made > stop_at:
                            if hard and made > room:
                                out.clear()
                                self._output_limit_reached(made + (self.backlog or 0))
                                break
                            self.pending.extend(it)
                            self.held_back = bool(self.pending)
                            break
                elif mode == REPLY_SKIP_NEXT:  # CLIENT REPLY SKIP itself: silent
                    client.reply_mode = REPLY_SKIP
                elif mode == REPLY_SKIP:
                    client.reply_mode = REPLY_ON
                if self.closing:
                    break
        return out

    # -- output ----------------------------------------------------------

    def memory(self) -> int:
        """What this connection holds, for ``maxmemory-clients``
        (:mod:`disque.node.client_memory`): its requests not run yet (what
        ``client-query-buffer-limit`` bounds), its replies queued behind an
        unfilled slot or held while the AOF cannot take the records they
        acknowledge, and the output written while its transport is full
        (what ``client-output-buffer-limit`` bounds)."""
        return self.parser.held() + self.queued + self.slotted + self.held_bytes() + (self.backlog or 0)

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
        if self.pending:  # parked again: the requests run leave the count
            self.queued -= request_size(islice(pending, len(pending) - len(self.pending)))
        else:
            self.queued = 0
        error = self.input_error
        if error is not None and not (self.parked or self.pending):
            out.append(b"-ERR " + error + b"\r\n")
        if out:
            self._emit(out)
        if error is not None and not (self.parked or self.pending):
            self.close()
        self._count_memory()

    def idle(self) -> bool:
        """Whether this client waits for nothing from the node (for
        ``timeout``): no parked command, no pending requests or replies."""
        return not (self.parked or self.pending or self.slots is not None or self.closing)


class RespFactory(Factory):
    noisy = False

    def __init__(self, runtime):
        self.runtime = runtime

    def buildProtocol(self, addr):
        p = RespProtocol(self.runtime)
        p.factory = self
        return p
