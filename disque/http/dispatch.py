"""HTTP requests as clients of the command layer.

An action of the HTTP side (pause a queue, requeue or delete a job) is the
RESP command it stands for, run by :func:`run` through the node's one
front door (``runtime.run_command``: the dispatch in force, which answers
-LOADING while the AOF loads, -MISCONF while it is in error) as the
request's user.
So the ACL check, MONITOR, the slow log, the command statistics and INFO
see an HTTP action as they see the same command from any client, and an
HTTP action can never do more than its user could over RESP.

:func:`request_client` makes the :class:`~disque.commands.context.ClientState`
that stands for a request: its user, its peer's address (MONITOR shows it,
CLIENT LIST and ACL LOG too), ``name=http``.  Invariant: it exists only
while the command runs; none stays in ``ctx.clients`` afterwards (it is
made and dropped around one synchronous call, and the commands run here
answer at once: they never park the client or answer later).
"""

from contextlib import contextmanager

from ..commands import TABLE
from ..commands.dispatcher import may_run, refusal
from ..access.protection import is_local

#: The HTTP status of a RESP error, by its code; any other error is 400.
STATUS = {b"NOPERM": 403, b"NOAUTH": 401, b"WRONGPASS": 401, b"NOJOB": 404, b"LOADING": 503,
          b"MISCONF": 503, b"OOM": 503}


class _Detached:
    """The connection of a request's client, as the command layer's users
    of ``ClientState.conn`` see one: nothing is ever delivered to it
    outside its one reply, nothing is left to close, and it holds no
    memory of its own (``maxmemory-clients`` counts 0 for it)."""

    closing = False
    counted = 0

    def deliver(self, data):
        pass

    def close(self):
        pass

    abort = close

    def idle(self):
        return True

    def memory(self):
        return 0


def _address(address) -> bytes:
    return b"%s:%d" % (getattr(address, "host", "?").encode(), getattr(address, "port", 0))


@contextmanager
def request_client(runtime, request, user):
    """A client of the command layer for ``request``, running as ``user``
    (authenticated), dropped when the block ends."""
    ctx = runtime.ctx
    runtime.set_time()
    peer = request.getClientAddress()
    client = ctx.new_client(_address(peer), _Detached(), _address(request.getHost()))
    client.user = user
    client.authenticated = True
    client.local = is_local(peer)
    client.name = b"http"
    try:
        yield client
    finally:
        ctx.drop_client(client)


def run(runtime, request, argv) -> bytes:
    """Run ``argv`` (a RESP command, bytes) as ``request.acl_user`` through
    the node's front door; carry out its effects (bus messages, AOF
    records); return its RESP reply."""
    with request_client(runtime, request, request.acl_user) as client:
        try:
            reply = runtime.run_command(client, argv)
        finally:
            runtime.after_batch()
    if not isinstance(reply, bytes):  # a parked client or a late reply: none of the actions' commands does it
        raise TypeError("%r did not answer at once" % argv[0])
    return reply


def refused(runtime, request, argv):
    """None if ``request.acl_user`` may run ``argv`` (the RESP command a
    read of the HTTP side stands for: INFO, QPEEK, SHOW...), else the
    -NOPERM reply, recorded in ACL LOG as a refusal of that command.  An
    unrestricted user costs one attribute read."""
    user = request.acl_user
    ctx = runtime.ctx
    if may_run(ctx, user, argv):
        return None
    with request_client(runtime, request, user) as client:
        return refusal(ctx, client, TABLE[argv[0].lower()], argv)


def http_error(reply: bytes):
    """``(HTTP status, text)`` of a RESP error reply; None for any other."""
    if reply[:1] != b"-":
        return None
    text = reply[1:].rstrip(b"\r\n")
    return STATUS.get(text.partition(b" ")[0], 400), "-" + text.decode("utf-8", "replace")
