"""A started node service in memory and one loopback client of it, for the
in-process benchmarks (``dispatch_bench.py``, ``inproc_bench.py``): no
sockets, a ``MemoryReactorClock``.  Import it after putting ``TREE`` (another
checkout) first on ``sys.path``: the node is that tree's."""

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from disque.config import Config
from disque.resp.protocol import RespProtocol

try:
    from disque.node.service import DisqueNodeService
except ImportError:  # a checkout from before disque/node/ (TREE)
    from disque.service import DisqueNodeService

T0 = 1_795_000_000  # the clock's start (seconds)


def node_in_memory(overrides):
    """``(service, reactor, protocol, transport)``: a node with the default
    directives and ``overrides``, started, and a client on 127.0.0.1.

    The node runs ``output-flush read`` where its tree has the directive, as
    the tests' nodes in memory do: its clock has no reactor turns, so with
    ``turn`` its replies would wait for the benchmark to advance the clock
    and the client's output would only grow (nothing would be measured
    leaving).  A reply leaves with the read that asked for it."""
    config = Config.defaults()
    if config.get_all(b"output-flush"):
        config.apply_overrides({"output-flush": "read"})
    config.apply_overrides(overrides)
    reactor = MemoryReactorClock()
    reactor.advance(T0)
    service = DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None)
    service.startService()
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    proto = RespProtocol(service.runtime)
    proto.makeConnection(transport)
    return service, reactor, proto, transport
