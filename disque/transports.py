"""Transport providers: plain TCP for clients (``IClientTransport``) and
for the cluster bus (``IBusTransport``)."""

import ipaddress

from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint
from zope.interface import implementer

from .interfaces import IBusTransport, IBusTransportFactory, IClientTransport, IClientTransportFactory

CONNECT_TIMEOUT = 5  # seconds


@implementer(IClientTransport)
class TCPTransport:
    def listen(self, reactor, host, port, factory, backlog):
        return reactor.listenTCP(port, factory, backlog=backlog, interface=host)


@implementer(IClientTransportFactory)
class TCPTransportFactory:
    name = "tcp"
    description = "Plain TCP (the default)."
    argStringFormat = "No arguments."

    def makeTransport(self, argstring, config):
        return TCPTransport()


tcp = TCPTransportFactory()


@implementer(IBusTransport)
class TCPBusTransport:
    def listen(self, reactor, host, port, factory, backlog):
        return reactor.listenTCP(port, factory, backlog=backlog, interface=host)

    def endpoint(self, reactor, host, port, bind_host):
        v6 = ipaddress.ip_address(host).version == 6
        bind = None
        if bind_host and bind_host not in ("0.0.0.0", "::"):
            if (ipaddress.ip_address(bind_host).version == 6) == v6:
                bind = (bind_host, 0)
        cls = TCP6ClientEndpoint if v6 else TCP4ClientEndpoint
        return cls(reactor, host, port, timeout=CONNECT_TIMEOUT, bindAddress=bind)


@implementer(IBusTransportFactory)
class TCPBusTransportFactory:
    name = "tcp"
    description = "Plain TCP cluster bus (the default)."
    argStringFormat = "No arguments."

    def makeBusTransport(self, argstring, config):
        return TCPBusTransport()


bus_tcp = TCPBusTransportFactory()
