"""Who an HTTP request is, and whether it is served at all
(docs/security.md, "The HTTP side").

:class:`AccessSite` is the site the service puts in front of any HTTP
frontend.  Before a resource sees a request it, in order:

1. sets the security headers (:data:`SECURITY_HEADERS`) on the response,
   whatever comes next: refusals and errors carry them too;
2. checks the ``Host`` header (:func:`host_allowed`): a name the node does
   not answer to is refused with 421, so a page of another site whose
   name was made to resolve to the node (DNS rebinding) cannot read it;
3. applies protected mode (:func:`disque.access.protection.refuses`): a peer that
   is not local while the default user has no password gets 403 and
   Redis' -DENIED text;
4. authenticates (:func:`credentials`, :func:`user_for`): HTTP Basic
   ``user:password`` is that ACL user; Basic with an empty name,
   ``default`` or a name that is no user, and ``Bearer <password>``, are
   the default user (what Prometheus' ``basic_auth`` and
   ``bearer_token`` send); no credentials are the default user while it
   needs no password, else 401.  Wrong passwords count against the same
   per-source throttle as AUTH (``NodeRuntime.auth_refusal``,
   ``client_auth_failed``): answered late after a few in a row, and a
   source refused for a while gets 429 without its password being looked
   at.

Invariant: a request that reaches a resource has ``acl_user`` set to the
:class:`disque.access.acl.User` it runs as; the resources check what that user
may do (disque.http.api, disque.http.site).  Everything is read at each
request, so CONFIG SET and ACL changes apply to the next one.

Each request answered is one line of the node's log (:func:`access_line`),
a debug line: written at ``loglevel verbose`` or ``debug`` only, where the
node's lines go (``logfile``, syslog), never to Twisted's own access log.
The site starts and stops without a line (``noisy = False``).
"""

import base64
import ipaddress
import json
import math

from twisted.web import resource, server

from ..access.acl import DEFAULT
from ..io.logs import logger
from ..commands.shown import client_info
from ..access.protection import DENIED, DENIED_REASON, refuses
from .dispatch import request_client

#: Only this origin's scripts, styles, images and requests; no inline
#: script or style, no ``eval``, no framing (the dashboard needs nothing
#: more; tests/process/test_e2e_dashboard.py runs it under this policy).
CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

#: On every response.  ``no-store``: nothing the node answers is kept by a
#: browser or a proxy (the dashboard's own files say ``no-cache`` instead:
#: kept, and checked again each time).
SECURITY_HEADERS = (
    (b"content-security-policy", CSP),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)

log = logger("disque.http")

NOAUTH = b"-NOAUTH Authentication required."
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled."
CHALLENGE = (b"www-authenticate", b'Basic realm="disque"')
MISDIRECTED = 421


def host_name(header: bytes):
    """The host in a ``Host`` header's value, lower case, without the port
    or an IPv6 address's brackets; None if it is not one."""
    try:
        text = header.decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, port = text[1:end], text[end + 1:]
    else:
        name, colon, port = text.partition(":")
        port = colon + port
    if port and not (port[0] == ":" and port[1:].isdigit()):
        return None
    return name or None


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(header: bytes, config) -> bool:
    """Whether the node answers to the ``Host`` header ``header``:
    ``localhost``, any IP address (127.0.0.1, ``[::1]``, the bound
    address, ...), ``http-bind``, and the names of ``http-allowed-hosts``
    (``*``: any, for a proxy in front that checks Host itself).

    An IP address is never a DNS rebinding: a browser sends the name it
    resolved, and an address resolves to nothing."""
    allowed = config["http-allowed-hosts"]
    if "*" in allowed:
        return True
    name = host_name(header)
    if name is None:
        return False
    if name == "localhost" or name == config["http-bind"].lower() or _is_ip_address(name):
        return True
    return any(name == other.lower() for other in allowed)


def credentials(header):
    """``(name, password)`` from an ``Authorization`` header's value: Basic
    gives both, Bearer a password for the name ``b""`` (the default user);
    None for no header, another scheme, or one that does not read."""
    if not header:
        return None
    scheme, _, value = header.partition(b" ")
    scheme = scheme.lower()
    if scheme == b"bearer":
        return b"", value.strip()
    if scheme != b"basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except ValueError:
        return None
    name, colon, password = decoded.partition(b":")
    return (name, password) if colon else None


def user_for(acl, name: bytes) -> bytes:
    """The user a Basic name authenticates as: itself if it is a user of
    the node, else the default user (an empty name, ``default``, or any
    other: Prometheus and browsers send a name even for ``requirepass``)."""
    return name if name and name in acl.users else DEFAULT


class Refusal(resource.Resource):
    """A request refused before any resource saw it: ``status`` and the
    error ``text`` (a RESP error line, ``-CODE message``), as JSON under
    ``/api`` and as plain text elsewhere; answered ``delay`` seconds late
    (a source failing passwords in a row) on ``reactor``."""

    isLeaf = True

    def __init__(self, status, text: bytes, headers=(), delay=0.0, reactor=None):
        super().__init__()
        self.status = status
        self.text = text
        self.headers = headers
        self.delay = delay
        self.reactor = reactor

    def render(self, request):
        request.setResponseCode(self.status)
        for name, value in self.headers:
            request.setHeader(name, value)
        text = self.text.decode("utf-8", "replace")
        if request.path == b"/api" or request.path.startswith(b"/api/"):  # API clients get JSON, errors included
            request.setHeader(b"content-type", b"application/json")
            body = json.dumps({"error": text}).encode()
        else:
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            body = text.encode() + b"\n"
        if not self.delay:
            return body
        call = self.reactor.callLater(self.delay, _finish, request, body)
        request.notifyFinish().addErrback(lambda _: call.cancel() if call.active() else None)
        return server.NOT_DONE_YET


def _finish(request, body):
    request.write(body)
    request.finish()


class AccessRequest(server.Request):
    """A request of the HTTP side.  ``acl_user``: the
    :class:`disque.access.acl.User` it runs as, set by :class:`AccessSite` before
    any resource sees the request."""

    acl_user = None


def _shown(value) -> str:
    """Bytes of a request (a path, a header) for a log line: printable
    ASCII as it is, any other byte, ``"`` and ``\\`` as ``\\xHH``."""
    if value is None:
        return "-"
    return "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else "\\x%02x" % c for c in value)


def access_line(request) -> str:
    """The access log line of ``request``, in the Combined Log Format less
    the time (the log's own) and with the user the request ran as:
    ``127.0.0.1 default "GET /api/node HTTP/1.1" 200 708 "-" "curl/8.5.0"``."""
    peer = request.getClientAddress()
    user = request.acl_user
    return '%s %s "%s %s %s" %d %s "%s" "%s"' % (
        getattr(peer, "host", "-"), "-" if user is None else _shown(user.name), _shown(request.method),
        _shown(request.uri), _shown(request.clientproto), request.code, request.sentLength or "-",
        _shown(request.getHeader(b"referer")), _shown(request.getHeader(b"user-agent")))


class AccessSite(server.Site):
    """The site of the HTTP side (see the module docstring)."""

    noisy = False  # no "Starting factory <...AccessSite object at 0x...>"

    def __init__(self, root, runtime):
        super().__init__(root, requestFactory=AccessRequest)
        self.runtime = runtime

    def log(self, request):
        """The access line, through the node's log (see the module
        docstring) instead of twisted.web's access log."""
        log.debug("HTTP {line}", line=access_line(request))

    def getResourceFor(self, request):
        for name, value in SECURITY_HEADERS:
            request.setHeader(name, value)
        refused = self._admit(request)
        if refused is not None:
            return refused
        return super().getResourceFor(request)

    def _admit(self, request):
        """None, ``request.acl_user`` set; or the :class:`Refusal`."""
        runtime = self.runtime
        host = request.getHeader(b"host")
        if host is not None and not host_allowed(host, runtime.config):
            shown = host[:100].decode("ascii", "replace").encode()
            return Refusal(MISDIRECTED, b"-ERR this node does not answer to the Host '" + shown
                           + b"': add the name to http-allowed-hosts if it is the node's")
        ctx = runtime.ctx
        peer = request.getClientAddress()
        if refuses(ctx, peer):
            ctx.stats.rejected += 1
            runtime.failed_auth.denied(getattr(peer, "host", "?"), DENIED_REASON)
            return Refusal(403, DENIED.rstrip(b"\r\n"))
        return self._authenticate(request, peer)

    def _authenticate(self, request, peer):
        runtime = self.runtime
        acl = runtime.ctx.acl
        given = credentials(request.getHeader(b"authorization"))
        if given is None:
            if acl.auth_required:
                return Refusal(401, NOAUTH, [CHALLENGE])
            request.acl_user = acl.default
            return None
        source = getattr(peer, "host", "?")
        refused = runtime.auth_refusal(source)
        if refused is not None:
            seconds = math.ceil(runtime.auth_throttle.refused_for(source))
            return Refusal(429, refused.rstrip(b"\r\n"), [(b"retry-after", b"%d" % seconds)])
        name = user_for(acl, given[0])
        user = acl.authenticate(name, given[1])
        if user is None:
            delay = runtime.client_auth_failed(source)
            with request_client(runtime, request, acl.default) as client:
                acl.record(b"auth", b"AUTH", name, client_info(runtime.ctx, client))
            return Refusal(401, WRONGPASS, [CHALLENGE], delay, runtime.reactor)
        runtime.client_auth_succeeded(source)
        request.acl_user = user
        return None
