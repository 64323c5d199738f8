"""TLS on the client port and on the cluster bus, from the ``tls-*`` directives.

The directives follow Redis 6+ (``tls-port``, ``tls-cert-file``,
``tls-key-file``, ``tls-ca-cert-file``, ``tls-ca-cert-dir``,
``tls-auth-clients``, ``tls-cluster``, ``tls-protocols``, ``tls-ciphers``,
``tls-ciphersuites``); ``docs/security.md`` says what each connection
verifies.  TLS is Twisted's (``TLSMemoryBIOProtocol`` over any stream
endpoint, pyOpenSSL underneath): this module makes the OpenSSL contexts and
wraps endpoints in them, so the listeners and links of
:mod:`disque.node.listeners` get TLS without the RESP or bus protocols knowing.

Four contexts, made from the same certificate, key and CA:

``clients``
    The TLS client port (``tls-port``).  ``tls-auth-clients yes`` (the
    default): a client must present a certificate signed by the CA;
    ``optional``: a certificate is asked for and, if one is given, must be
    valid; ``no``: none is asked for.
``bus-server`` and ``bus-client``
    The cluster bus with ``tls-cluster yes``: mutual TLS whatever
    ``tls-auth-clients`` says.  Both ends present their certificate and
    verify the other's chain against the CA, so a peer without a
    certificate from the cluster's CA never completes the handshake and no
    byte of its reaches :class:`disque.bus.protocol.BusProtocol`.  Names are
    not checked on the bus (as in Redis): peers are learned by gossip as
    addresses, and membership is having a certificate of the CA.
``http``
    The HTTP side with ``http-tls yes`` (HTTPS): the node's certificate,
    no client certificate asked (browsers and Prometheus authenticate with
    ``requirepass``).

Invariants: the contexts are built whole before any of them replaces the
current ones (:meth:`TLSContexts.reload`), so a failed reload (CONFIG SET
of a missing file) changes nothing; a connection takes the context current
when it is accepted or made, so a reload serves new connections and leaves
the open ones alone.
"""

import os

from twisted.internet.interfaces import (IOpenSSLClientConnectionCreator, IOpenSSLServerConnectionCreator,
                                         IStreamServerEndpoint)
from zope.interface import implementer

from ..config import tls_protocol_range


#: The directives a reload reads: CONFIG SET of any of them rebuilds the contexts.
RELOADABLE = ("tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir", "tls-auth-clients",
              "tls-protocols", "tls-ciphers", "tls-ciphersuites")


class TLSError(ValueError):
    """A TLS directive the node cannot use; ``str()`` is one line that
    names the directive."""


def enabled(config) -> bool:
    """True if the node uses TLS anywhere (a TLS client port, bus or
    HTTP side)."""
    return bool(config["tls-port"]) or bool(config["tls-cluster"]) or bool(config["http-tls"])


def check(config):
    """Start-up checks of a node that uses TLS: what is missing is named
    (the files themselves are read by :class:`TLSContexts`)."""
    if config["tls-cluster"] and not config["tls-port"]:
        raise TLSError("tls-cluster: the TLS cluster bus needs tls-port (peers reach the bus at "
                       "tls-port + 10000)")
    for name in ("tls-cert-file", "tls-key-file"):
        if not config[name]:
            raise TLSError("%s: TLS needs a certificate and its private key: set tls-cert-file and "
                           "tls-key-file" % name)
    if config["http-tls"] and not config["http-port"]:
        raise TLSError("http-tls: the HTTP side is off: set http-port")
    if (config["tls-port"] and config["tls-auth-clients"] != "no" or config["tls-cluster"]) \
            and not (config["tls-ca-cert-file"] or config["tls-ca-cert-dir"]):
        raise TLSError("tls-ca-cert-file: either tls-ca-cert-file or tls-ca-cert-dir must be set when "
                       "tls-cluster or tls-auth-clients is enabled")
    if config["tls-cluster"]:
        for name, strings in (("cluster-listen", config["cluster-listen"]), ("cluster-connect",
                                                                            [config["cluster-connect"]])):
            if any(s.split(":", 1)[0].lower() in ("ssl", "tls") for s in strings):
                raise TLSError("%s: with tls-cluster yes it names the transport under TLS (tcp:, unix:...), "
                               "not a TLS endpoint" % name)
    if config["port"] and config["port"] == config["tls-port"] and not config["listen"]:
        raise TLSError("tls-port: %d is the plain port too: give TLS its own port, or set port 0 for TLS "
                       "only" % config["port"])


def _openssl():
    try:
        from OpenSSL import SSL
    except ImportError:
        raise TLSError("tls-port: TLS needs pyOpenSSL (disque's tls extra; README, Install)") from None
    return SSL


def _readable(name, path):
    """A clear line for a file (or, for tls-ca-cert-dir, a directory) the
    node cannot read, before OpenSSL's terser words."""
    if name == "tls-ca-cert-dir":
        if not os.path.isdir(path):
            raise TLSError("%s: %s is not a directory" % (name, path))
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise TLSError("%s: can't read %s: %s" % (name, path, e.strerror or e)) from None


def error_text(error):
    """The reasons of an OpenSSL.SSL.Error, joined (the text of anything else)."""
    parts = []
    for item in (error.args[0] if error.args and isinstance(error.args[0], list) else []):
        parts.append(str(item[-1]) if isinstance(item, tuple) else str(item))
    return ", ".join(p for p in parts if p) or str(error)


def _accept(conn, cert, errno, depth, ok):
    return bool(ok)  # OpenSSL's verdict on the chain, nothing added


def make_context(config, verify):
    """An OpenSSL context from the directives.  ``verify``: "yes" (the peer
    must present a certificate signed by the CA), "optional" (if it
    presents one) or "no" (none is asked for).  Raises TLSError."""
    SSL = _openssl()
    versions = (SSL.TLS1_VERSION, SSL.TLS1_1_VERSION, SSL.TLS1_2_VERSION, SSL.TLS1_3_VERSION)
    low, high = tls_protocol_range(config["tls-protocols"])  # checked by the config
    ctx = SSL.Context(SSL.TLS_METHOD)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    ctx.set_min_proto_version(versions[low])
    ctx.set_max_proto_version(versions[high])
    cert, key = config["tls-cert-file"], config["tls-key-file"]
    _readable("tls-cert-file", cert)
    _readable("tls-key-file", key)
    try:
        ctx.use_certificate_chain_file(cert.encode())
    except SSL.Error as e:
        raise TLSError("tls-cert-file: %s is not a PEM certificate: %s" % (cert, error_text(e))) from None
    mismatch = "tls-key-file: %s is not the key of the certificate in %s (tls-cert-file)" % (key, cert)
    try:
        ctx.use_privatekey_file(key.encode())
    except SSL.Error as e:
        if "mismatch" in error_text(e):  # OpenSSL 3 compares them here
            raise TLSError(mismatch) from None
        raise TLSError("tls-key-file: %s is not a PEM private key: %s" % (key, error_text(e))) from None
    try:
        ctx.check_privatekey()
    except SSL.Error:
        raise TLSError(mismatch) from None
    ca_file, ca_dir = config["tls-ca-cert-file"], config["tls-ca-cert-dir"]
    if ca_file:
        _readable("tls-ca-cert-file", ca_file)
    if ca_dir:
        _readable("tls-ca-cert-dir", ca_dir)
    if ca_file or ca_dir:
        try:
            ctx.load_verify_locations(ca_file.encode() if ca_file else None, ca_dir.encode() if ca_dir else None)
        except SSL.Error as e:
            name = "tls-ca-cert-file" if ca_file else "tls-ca-cert-dir"
            raise TLSError("%s: %s holds no PEM certificate: %s" % (name, ca_file or ca_dir, error_text(e))) from None
    if verify == "yes":
        ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, _accept)
    elif verify == "optional":
        ctx.set_verify(SSL.VERIFY_PEER, _accept)
    else:
        ctx.set_verify(SSL.VERIFY_NONE, _accept)
    ctx.set_session_id(b"disque")  # resumed sessions keep their verified peer
    if config["tls-ciphers"]:
        try:
            ctx.set_cipher_list(config["tls-ciphers"].encode())
        except SSL.Error as e:
            raise TLSError("tls-ciphers: %r: %s" % (config["tls-ciphers"], error_text(e))) from None
    if config["tls-ciphersuites"]:
        if not hasattr(ctx, "set_tls13_ciphersuites"):
            raise TLSError("tls-ciphersuites: this pyOpenSSL cannot set TLSv1.3 ciphersuites")
        try:
            ctx.set_tls13_ciphersuites(config["tls-ciphersuites"].encode())
        except SSL.Error as e:
            raise TLSError("tls-ciphersuites: %r: %s" % (config["tls-ciphersuites"], error_text(e))) from None
    return ctx


class TLSContexts:
    """The node's current contexts by role ("clients", "bus-server",
    "bus-client", "http"), and connection creators that use whichever is current
    (see the module docstring)."""

    def __init__(self, config):
        self.config = config
        self.current = self._build()

    def _build(self):
        config = self.config
        check(config)
        contexts = {}
        if config["tls-port"]:
            contexts["clients"] = make_context(config, config["tls-auth-clients"])
        if config["http-tls"]:  # HTTPS for browsers and Prometheus: no client certificate asked
            contexts["http"] = make_context(config, "no")
        if config["tls-cluster"]:
            contexts["bus-server"] = make_context(config, "yes")
            contexts["bus-client"] = make_context(config, "yes")
        return contexts

    def reload(self):
        """Rebuild every context from the directives (CONFIG SET of one of
        RELOADABLE); on TLSError the current ones stay."""
        self.current = self._build()

    def server(self, role):
        return _ServerCreator(self, role)

    def client(self):
        return _ClientCreator(self)


@implementer(IOpenSSLServerConnectionCreator)
class _ServerCreator:
    def __init__(self, contexts, role):
        self.contexts = contexts
        self.role = role

    def serverConnectionForTLS(self, protocol):
        from OpenSSL import SSL

        return SSL.Connection(self.contexts.current[self.role], None)


@implementer(IOpenSSLClientConnectionCreator)
class _ClientCreator:
    def __init__(self, contexts):
        self.contexts = contexts

    def clientConnectionForTLS(self, protocol):
        from OpenSSL import SSL

        return SSL.Connection(self.contexts.current["bus-client"], None)


@implementer(IStreamServerEndpoint)
class TLSServerEndpoint:
    """Any stream server endpoint, with TLS on every connection it accepts
    (the server side of ``twisted.internet.endpoints.wrapClientTLS``)."""

    def __init__(self, wrapped, creator):
        self.wrapped = wrapped
        self.creator = creator

    def listen(self, factory):
        from twisted.protocols.tls import TLSMemoryBIOFactory

        return self.wrapped.listen(TLSMemoryBIOFactory(self.creator, False, factory))


def wrap_client(creator, endpoint):
    """``endpoint`` (a client endpoint to a peer's bus) with TLS."""
    from twisted.internet.endpoints import wrapClientTLS

    return wrapClientTLS(creator, endpoint)
