"""Client transport providers (``IClientTransport``): plain TCP."""

from zope.interface import implementer

from .interfaces import IClientTransport, IClientTransportFactory


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
