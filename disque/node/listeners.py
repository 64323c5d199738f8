"""Where a node listens and how it reaches its peers: Twisted endpoint strings.

Three directives, each with a default derived from ``port`` and ``bind``
exactly as the original listens (so ``--port``/``--bind`` keep working):

``listen``
    Client listeners, one or more server endpoint strings
    (``tcp:7711:interface=127.0.0.1``, ``unix:/run/disque.sock``,
    ``ssl:7711:privateKey=...``).  Default: ``tcp:<port>`` on every ``bind``
    address with ``tcp-backlog``; ``port 0`` takes a free port.
``cluster-listen``
    Bus listeners.  Peers find the bus at the node's advertised port +
    10000, the advertised port being that of the first client listener.
    Default: TCP on that port + 10000 on every ``bind`` address, resolved
    when the client listener is up (``port 0`` works).
``cluster-connect``
    How links to peers are made: a client endpoint string without host and
    port (``tcp:timeout=5``, ``ssl:caCertsDir=/etc/ssl/certs``); each link
    adds ``host=`` and ``port=`` of the peer's bus.  Default: TCP with a
    5 s timeout, from the first ``bind`` address when it is a specific one
    of the peer's address family (as the original binds its bus
    connections).

Endpoint strings are Twisted's plugin seam for transports: TLS, Unix
sockets or a transport a third party writes need no code in the node.  A
string that does not parse stops start-up with :class:`EndpointError`.

Whether the bus is reachable beyond loopback (:func:`bus_beyond_loopback`)
decides whether it must be closed: such a node needs ``cluster-password``
or ``tls-cluster yes``, or ``cluster-trusted-network yes`` (the service
refuses to start otherwise, see ``docs/security.md``).

TLS from the ``tls-*`` directives (:mod:`disque.node.tls`) goes over these
endpoints: ``tls-port`` adds TLS client listeners on every ``bind``
address (:func:`tls_descriptions`), beside the plain ones, or alone when
``port`` is 0 (then 0 means "no plain port", as in Redis, not "a free
port"); ``tls-cluster yes`` wraps the bus listeners and every link's
endpoint in mutual TLS, and puts the TLS client listeners first, so the
node advertises its TLS port and its bus is at ``tls-port`` + 10000.
"""

import ipaddress
import re

from twisted.application.internet import StreamServerEndpointService
from twisted.internet.endpoints import clientFromString, quoteStringArgument, serverFromString
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IStreamServerEndpoint
from zope.interface import implementer

from ..bus.links import BUS_PORT_OFFSET
from ..access.protection import is_loopback
from ..config.specs import parse_seed

#: ``bind`` values that mean every interface (the dashboard's and the
#: seeds' idea of "this node's own addresses" follows them).
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "*")
_LOOPBACK_NAMES = (b"127.0.0.1", b"::1", b"localhost")


def own_hosts(binds):
    """The hosts that name this node, from its ``bind`` addresses (for
    every interface, the loopback names; the seeds learn the others when
    their handshake is answered by this node itself)."""
    hosts = set()
    for bind in binds or [""]:
        try:
            host, _ = parse_seed("%s:1" % ("[%s]" % bind if ":" in bind else bind))
        except ValueError:
            host = bind
        if bind in WILDCARD_HOSTS:
            hosts.update(_LOOPBACK_NAMES)
            continue
        hosts.add(host.encode())
        if host.startswith("127.") or host == "::1":
            hosts.add(b"localhost")
    return frozenset(hosts)

CONNECT_TIMEOUT = 5  # seconds


class EndpointError(ValueError):
    """An endpoint string that does not parse; ``str()`` is one line naming
    the directive and the string."""


def _explain(directive, description, error):
    text = re.sub(r"^[\w.]+\(\) ", "", str(error))  # "_parseTCP() got an unexpected ..." -> "got an ..."
    text = re.sub(r"^invalid literal for int\(\) with base 10: (.*)", r"\1 is not a number", text)
    return EndpointError("%s: bad endpoint %r: %s" % (directive, description, text))


def _tcp(port, address):
    """A TCP server endpoint string for ``address`` (tcp6 for IPv6)."""
    kind = "tcp6" if ":" in address else "tcp"
    return "%s:%d:interface=%s" % (kind, port, quoteStringArgument(address))


def client_descriptions(config):
    """The ``listen`` endpoint strings: configured, or derived from ``port``,
    ``bind`` and ``tcp-backlog`` (none for ``port 0`` with a ``tls-port``:
    TLS only)."""
    if config["listen"]:
        return config["listen"]
    if config["port"] == 0 and config["tls-port"]:
        return []
    return _derived(config, config["port"])


def tls_descriptions(config):
    """The endpoint strings under the TLS client listeners: ``tls-port`` on
    every ``bind`` address (none when ``tls-port`` is 0)."""
    return _derived(config, config["tls-port"]) if config["tls-port"] else []


def _derived(config, port):
    backlog = config["tcp-backlog"]
    return ["%s:backlog=%d" % (_tcp(port, host), backlog) for host in config["bind"] or ["0.0.0.0"]]


def bus_descriptions(config, client_port):
    """The ``cluster-listen`` endpoint strings: configured, or derived from
    the advertised client port and ``bind``."""
    if config["cluster-listen"]:
        return config["cluster-listen"]
    return _derived(config, client_port + BUS_PORT_OFFSET)


def _fields(description):
    """``(args, kwargs)`` of an endpoint string, as Twisted reads it: fields
    split at ``:``, ``key=value`` fields by name, ``\\`` escaping the next
    character."""
    args, kwargs = [], {}
    current, key, escaped = [], None, False
    for ch in description:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "=" and key is None:
            key, current = "".join(current), []
        elif ch == ":":
            if key is None:
                args.append("".join(current))
            else:
                kwargs[key] = "".join(current)
            current, key = [], None
        else:
            current.append(ch)
    if key is None:
        args.append("".join(current))
    else:
        kwargs[key] = "".join(current)
    return args, kwargs


def beyond_loopback(description):
    """Where the server endpoint string ``description`` listens beyond
    loopback, for a message (an address, "every interface", or the string
    itself for a transport this cannot tell about), or None when it listens
    on loopback only (``disque.access.protection.is_loopback``) or on a Unix
    socket."""
    args, kwargs = _fields(description)
    kind = args[0].lower()
    if kind == "unix":
        return None
    if kind not in ("tcp", "tcp6", "ssl"):
        return description
    interface = kwargs.get("interface")
    if interface is None and kind != "ssl" and len(args) > 2:  # tcp:<port>:<interface>
        interface = args[2]
    if not interface or interface in ("0.0.0.0", "::"):
        return "every interface"
    return None if is_loopback(interface) else interface  # (a name may resolve to anything: not loopback)


def bus_beyond_loopback(config):
    """Where the cluster bus listens beyond loopback (``cluster-listen``, or
    the bus listeners ``bind`` derives), as :func:`beyond_loopback` says of
    each listener; empty when only this machine can reach it."""
    places = (beyond_loopback(d) for d in config["cluster-listen"] or bus_descriptions(config, 0))
    return [place for place in places if place is not None]


def open_bus_refusal(config, password):
    """Why this node must not run its bus with ``password`` (``""``: none),
    in one line naming the directives that would close it, or None: a bus
    reachable beyond loopback needs ``cluster-password`` or ``tls-cluster
    yes``, unless ``cluster-trusted-network yes`` says that every host
    that can reach it may join."""
    if password or config["tls-cluster"] or config["cluster-trusted-network"]:
        return None
    places = bus_beyond_loopback(config)
    if not places:
        return None
    return ("the cluster bus listens beyond loopback (%s) with neither cluster-password nor tls-cluster yes: "
            "anyone who can reach it could join the cluster; set one of them, or cluster-trusted-network yes "
            "if every host that can reach the bus may join" % ", ".join(places))


def server_endpoint(reactor, directive, description):
    """``serverFromString``, with its errors as EndpointError."""
    try:
        return serverFromString(reactor, description)
    except (ValueError, TypeError, KeyError, OSError, ImportError) as e:
        raise _explain(directive, description, e) from None


class ListenError(CannotListenError):
    """A listener that cannot listen (its port in use, a port it may not
    bind, no directory for its Unix socket): start-up stops.  ``str()`` is
    one line naming the directive, the address and the cause, as the
    operator sees it (``disque: port: can't listen on 127.0.0.1:7711:
    Address already in use``)."""

    def __init__(self, directive, description, error):
        if isinstance(error, CannotListenError):
            super().__init__(error.interface, error.port, error.socketError)
            self.line = "%s: can't listen on %s: %s" % (directive, _where(error, description),
                                                        _cause(error.socketError))
        elif isinstance(error, EndpointError):  # the bus's address could not be derived
            super().__init__(None, None, error)
            self.line = str(error)
        else:  # an OSError of another step (a Unix socket's lock file in a missing directory)
            super().__init__(None, None, error)
            self.line = "%s: can't listen on %s: %s" % (directive, description, _cause(error))

    def __str__(self):
        return self.line


def _where(error, description):
    """Where a listener tried to listen: ``host:port`` for TCP, else its
    endpoint string."""
    if isinstance(error.port, int):
        host = error.interface or "*"
        return "%s:%d" % ("[%s]" % host if ":" in host else host, error.port)
    return description


def _cause(error):
    return (getattr(error, "strerror", None) or str(error)).rstrip(".")


class Listener(StreamServerEndpointService):
    """One listener of the node: ``StreamServerEndpointService`` that
    remembers the ``IListeningPort`` it got, and lets a failure to listen
    (port in use) stop start-up, with a :class:`ListenError` naming
    ``directive`` (how the operator set the address), instead of leaving a
    node that cannot be reached."""

    _raiseSynchronously = True  # as twisted.application.strports.service does

    def __init__(self, endpoint, factory, description, directive="listen"):
        self.description = description
        self.directive = directive
        self.port = None
        super().__init__(_Recording(endpoint, self), factory)

    def privilegedStartService(self):
        try:
            super().privilegedStartService()
        except (CannotListenError, EndpointError, OSError) as e:
            if isinstance(e, ListenError):
                raise
            raise ListenError(self.directive, self.description, e) from None


@implementer(IStreamServerEndpoint)
class _Recording:
    """Hands the listening port to its Listener once listening."""

    def __init__(self, endpoint, listener):
        self.endpoint = endpoint
        self.listener = listener

    def listen(self, factory):
        def listening(port):
            self.listener.port = port
            return port

        return self.endpoint.listen(factory).addCallback(listening)


@implementer(IStreamServerEndpoint)
class DeferredEndpoint:
    """A server endpoint whose string is known only when it listens: the
    derived bus listeners follow the client port, which ``port 0`` leaves
    to the system."""

    def __init__(self, reactor, directive, describe):
        self.reactor = reactor
        self.directive = directive
        self.describe = describe  # () -> endpoint string

    def listen(self, factory):
        return server_endpoint(self.reactor, self.directive, self.describe()).listen(factory)


def listening_port(listener):
    """The TCP port a Listener is bound to, or None (not listening, or not
    an address with a port, such as a Unix socket)."""
    if listener.port is None:
        return None
    return getattr(listener.port.getHost(), "port", None)


class BusConnector:
    """Builds the client endpoint of a link to a peer's bus from
    ``cluster-connect`` (see the module docstring); with ``tls`` (an
    ``IOpenSSLClientConnectionCreator``: ``tls-cluster yes``) the link
    speaks TLS over it."""

    def __init__(self, reactor, config, tls=None):
        self.reactor = reactor
        self.tls = tls
        self.template = config["cluster-connect"]
        binds = config["bind"] or []
        self.bind_host = binds[0] if binds else None
        self.endpoint("127.0.0.1", 7711 + BUS_PORT_OFFSET)  # a bad template stops start-up here

    def description(self, host: str, port: int) -> str:
        where = "host=%s:port=%d" % (quoteStringArgument(host), port)
        if self.template:
            return "%s:%s" % (self.template, where)
        text = "tcp:%s:timeout=%d" % (where, CONNECT_TIMEOUT)
        source = self._source_for(host)
        return text + (":bindAddress=%s" % quoteStringArgument(source) if source else "")

    def _source_for(self, host):
        """The first bind address, if it is a specific address of ``host``'s
        family: links then leave from the address peers know the node by."""
        bind = self.bind_host
        if not bind or bind in ("0.0.0.0", "::"):
            return None
        try:
            same = ipaddress.ip_address(bind).version == ipaddress.ip_address(host).version
        except ValueError:
            return None
        return bind if same else None

    def endpoint(self, host: str, port: int):
        """An ``IStreamClientEndpoint`` to the bus at ``host``:``port``."""
        description = self.description(host, port)
        try:
            endpoint = clientFromString(self.reactor, description)
        except (ValueError, TypeError, KeyError, OSError, ImportError) as e:
            raise _explain("cluster-connect", self.template or description, e) from None
        if self.tls is not None:
            from .tls import wrap_client

            endpoint = wrap_client(self.tls, endpoint)
        return endpoint

    @staticmethod
    def tls_error_text(error) -> str:
        """A failed TLS handshake of a link in words (an OpenSSL error's
        reasons), for the links' log line."""
        from .tls import error_text

        return error_text(error)
