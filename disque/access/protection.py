"""Who may reach the node at all, and who may run DEBUG: protected mode and
``enable-debug-command``, in Redis 7's terms.

*Local* means the loopback interface (127.0.0.0/8, ``::1``, and the
IPv4-mapped ``::ffff:127.x.y.z``) or a Unix socket.  Both checks are made
about a connection's peer address, once, when it connects: the RESP
protocol asks :func:`refuses` in ``connectionMade`` (never per request) and
keeps :func:`is_local` on the client for DEBUG.

Protected mode (``protected-mode yes``, the default) applies while the
``default`` user needs no password: then a client that is not local gets
:data:`DENIED` and is closed, whatever ``bind`` says (Redis 7 no longer
looks at ``bind``).  Setting a password for the default user
(``requirepass``), or ``protected-mode no``, lifts it.  Both are read at
each connection, so CONFIG SET takes effect for the next one.

The HTTP side applies the same rule through :func:`refuses` with the
request's peer address (``request.getClientAddress()``), at each request
(disque.http.access).
"""

import ipaddress

from twisted.internet.address import UNIXAddress

#: Redis 7's reply, with Disque for Redis.
DENIED = (
    b"-DENIED Disque is running in protected mode because protected mode is enabled and no password is "
    b"set for the default user. In this mode connections are only accepted from the loopback interface. "
    b"If you want to connect from external computers to Disque you may adopt one of the following "
    b"solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from "
    b"the loopback interface by connecting to Disque from the same host the server is running, however "
    b"MAKE SURE Disque is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make "
    b"this change permanent. 2) Alternatively you can just disable the protected mode by editing the "
    b"Disque configuration file, and setting the protected mode option to 'no', and then restarting the "
    b"server. 3) If you started the server manually just for testing, restart it with the "
    b"'--protected-mode no' option. 4) Set up an authentication password for the default user. NOTE: You "
    b"only need to do one of the above things in order for the server to start accepting connections "
    b"from the outside.\r\n")

#: Why a refused client was refused, as the log says it.
DENIED_REASON = "protected mode is enabled and no password is set for the default user"

#: Redis 7's reply to DEBUG when ``enable-debug-command`` does not allow it.
DEBUG_NOT_ALLOWED = (
    b"-ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run "
    b"it from a local connection, otherwise you need to set this option in the configuration file, and "
    b"then restart the server.\r\n")


def is_loopback(host) -> bool:
    """Whether ``host`` (an IP address as str or bytes) is on the loopback
    interface: 127.0.0.0/8, ``::1``, or an IPv4-mapped 127 address.
    Anything that is not an IP address (a name, garbage) is not."""
    try:
        if isinstance(host, bytes):
            host = host.decode("ascii")
        ip = ipaddress.ip_address(host)
    except (ValueError, UnicodeDecodeError):
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def is_local(address) -> bool:
    """Whether a connection's peer ``address`` (a Twisted ``IAddress``) is
    local: a Unix socket, or an IP address on the loopback interface."""
    if isinstance(address, UNIXAddress):
        return True
    return is_loopback(getattr(address, "host", None) or "")


def protected(ctx) -> bool:
    """Whether protected mode is in force: ``protected-mode`` is on and
    the ``default`` user has no password (``nopass``: no ``requirepass``
    and no ``>password`` rule), as Redis 7 asks."""
    return ctx.config["protected-mode"] and ctx.acl.default_nopass


def refuses(ctx, address) -> bool:
    """Whether protected mode refuses a connection from ``address`` (a
    Twisted ``IAddress``): it is in force and the peer is not local."""
    return not is_local(address) and protected(ctx)


def debug_allowed(ctx, client) -> bool:
    """``enable-debug-command``: ``yes``, or ``local`` and ``client``
    connected from a local address (:func:`is_local`, kept on the client
    when it connected)."""
    mode = ctx.config["enable-debug-command"]
    return mode == "yes" or (mode == "local" and client.local)
