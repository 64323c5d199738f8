"""Why a node could not be used, in the clients' words: one function per
cause, giving the error both clients raise for it (its class, the node's
``host:port``, the reason), so the Twisted client and the blocking client
name a failure alike.  Pure: the transports (``connection``, ``txconn``)
see what happened on the wire and call these.

Two causes look like others on the wire, and a *probe* (one more short
connection, made only after a failure) tells them apart:

* a node serving TLS closes a plain connection without a byte, as a
  server that closes every connection does: a plain client that got no
  byte sends a TLS ClientHello (:func:`tls_hello`), and a TLS record in
  answer means a TLS port;
* a plain node does not answer a TLS ClientHello, as a stalled node does
  not: a TLS client whose handshake failed or got no answer sends a plain
  ``PING``, and a RESP answer means a plain port.

:func:`probe_for` says which probe (if any) an error calls for,
:func:`diagnosed` turns the probe's answer into the better error.
"""

import re
import ssl
from typing import Optional

from . import errors
from .replies import parse_hello

SHOWN = 40  # bytes of an answer quoted in a message

PLAIN_PROBE = b"PING\r\n"
_TLS_HELLO = []


def refused(address: str) -> errors.ConnectionError:
    return errors.ConnectionError.at(address, "connection refused")


def no_connection(address: str, seconds: float) -> errors.ConnectionError:
    return errors.ConnectionError.at(address, "no connection within %g s" % seconds)


def unreachable(address: str, words: str) -> errors.ConnectionError:
    """Any other failure to connect (``words``: the system's)."""
    return errors.ConnectionError.at(address, "cannot connect: %s" % words)


def no_reply(address: str, seconds: Optional[float] = None) -> errors.ConnectionError:
    return errors.ConnectionError.at(address, "no reply within %g s" % seconds if seconds else "no reply in time")


def lost(address: str, words: Optional[str] = None) -> errors.ConnectionError:
    return errors.ConnectionError.at(address, "lost the connection" + (": %s" % words if words else ""))


def _quote(data: bytes) -> str:
    return repr(data[:SHOWN]) + ("..." if len(data) > SHOWN else "")


def looks_like_tls(data: bytes) -> bool:
    """Whether ``data`` starts with a TLS record (a handshake or an alert)."""
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 3


def looks_like_resp(data: bytes) -> bool:
    """Whether ``data`` starts like a RESP reply (to PING: ``+PONG``, or an
    error such as ``-NOAUTH``)."""
    return data[:1] in (b"+", b"-") and data[1:2].isalpha()


def not_resp(address: str, data: bytes):
    """The node answered ``data``, which is not RESP: a TLS record means
    the node serves TLS (and the client does not use it)."""
    if looks_like_tls(data):
        return serves_tls(address)
    return errors.ProtocolMismatch.at(address, "does not speak RESP (got %s)" % _quote(data))


def closed_silently(address: str) -> errors.ProtocolMismatch:
    """The node closed a new connection without a byte.  It does not last:
    a proxy in front of a node that is down does the same."""
    error = errors.ProtocolMismatch.at(address, "does not speak RESP (it closed the connection before answering)",
                                       lasting=False)
    error.probe = "tls"
    return error


def not_disque(address: str, reply) -> errors.ProtocolMismatch:
    shown = repr(reply)
    return errors.ProtocolMismatch.at(address, "is not a Disque node (HELLO answered %s%s)"
                                      % (shown[:SHOWN * 2], "..." if len(shown) > SHOWN * 2 else ""))


def hello(reply, address: str, host: Optional[str] = None):
    """HELLO's reply from the node at ``address`` as a
    :class:`~disque.client.job.Hello`, or :func:`not_disque` for a reply
    no Disque node gives (a Redis server's, a RESP server's ``+OK``)."""
    try:
        return parse_hello(reply, host=host)
    except (ValueError, TypeError, IndexError, AttributeError):
        raise not_disque(address, reply) from None


def serves_tls(address: str) -> errors.TLSError:
    return errors.TLSError.at(address, "TLS: the node serves TLS, and the client connects without it "
                                       "(give tls=TLSOptions(...))")


def no_tls(address: str) -> errors.TLSError:
    return errors.TLSError.at(address, "TLS: the node does not serve TLS (it answers plain RESP), "
                                       "and the client connects with it")


def tls_failed(address: str, words: str, maybe_plain: bool = False) -> errors.TLSError:
    """TLS failed (``words``: OpenSSL's).  ``maybe_plain``: the handshake
    failed on what the node sent, which a plain node may have sent (a
    probe tells); a certificate that does not verify came from TLS."""
    error = errors.TLSError.at(address, "TLS: %s" % words)
    if maybe_plain:
        error.probe = "plain"
    return error


def tls_closed(address: str) -> errors.TLSError:
    """The node closed the connection during the TLS handshake (as a
    server that closes every connection would: it may not last)."""
    error = errors.TLSError.at(address, "TLS: the node closed the connection during the handshake", lasting=False)
    error.probe = "plain"
    return error


def no_handshake(address: str, seconds: float) -> errors.ConnectionError:
    """No TLS handshake within ``seconds``: a stalled node, or a plain one
    (which waits for a command): a probe tells."""
    error = errors.ConnectionError.at(address, "no TLS handshake within %g s" % seconds)
    error.probe = "plain"
    return error


def ssl_words(e: Exception) -> str:
    """The words of an error of Python's ``ssl`` module, without its codes."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return "certificate verify failed: %s" % (e.verify_message or e.reason)
    text = str(e)
    found = re.search(r"\]\s*([^(\]]+?)\s*(\(_ssl\.c.*)?$", text)
    return found.group(1) if found else text


def auth_failed(address: str, line: str) -> errors.AuthError:
    """AUTH refused (``line``: the node's error reply, without ``-``)."""
    reason = line[4:] if line.startswith("ERR ") else line
    return _auth_error("AUTH failed on node %s: %s" % (address, reason), address, line)


def password_required(address: str, line: str) -> errors.AuthError:
    """``-NOAUTH``: the client sent no password to a node that wants one."""
    return _auth_error("node %s requires a password (set the 'password' option): %s" % (address, line),
                       address, line)


def _auth_error(text: str, address: str, line: str) -> errors.AuthError:
    error = errors.AuthError(text)
    reply = errors.AuthError(line)
    error.address, error.code, error.message = address, reply.code, reply.message
    return error


def tls_hello() -> bytes:
    """A TLS ClientHello (from Python's ``ssl``, in memory: no socket)."""
    if not _TLS_HELLO:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        outgoing = ssl.MemoryBIO()
        tls = ctx.wrap_bio(ssl.MemoryBIO(), outgoing)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        _TLS_HELLO.append(outgoing.read())
    return _TLS_HELLO[0]


def probe_for(error: Exception, tls: bool) -> Optional[bytes]:
    """What to send to the node on a new connection to tell what ``error``
    means, or ``None`` (no probe: the error says it all)."""
    kind = getattr(error, "probe", None)
    if kind == "tls" and not tls:
        return tls_hello()
    if kind == "plain" and tls:
        return PLAIN_PROBE
    return None


def diagnosed(error: Exception, answer: bytes) -> Exception:
    """``error``, or the cause the probe's ``answer`` (its first bytes;
    ``b""`` for none) shows."""
    kind = getattr(error, "probe", None)
    address = getattr(error, "address", None)
    if kind == "tls" and looks_like_tls(answer):
        return serves_tls(address)
    if kind == "plain" and looks_like_resp(answer):
        return no_tls(address)
    return error
