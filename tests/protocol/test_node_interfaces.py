"""The node's declared seams: the runtime provides what a client protocol
(RESP, HTTP) may ask (IClientRuntime, which extends the handlers'
INodeRuntime), its bus hub what the bus protocol and links may ask
(IBusHub), both checked with zope.interface.verify on a real node."""

import pytest
from twisted.internet.testing import MemoryReactorClock
from zope.interface import Interface, implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from disque.config import Config
from disque.interfaces import IBusHub, IClientRuntime, INodeRuntime
from disque.node.service import DisqueNodeService


@pytest.fixture
def service(tmp_path):
    config = Config.defaults()
    config.apply_overrides({"dir": str(tmp_path), "persistence": "none"})
    reactor = MemoryReactorClock()
    reactor.advance(1_795_000_000)
    s = DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None)
    s.startService()
    yield s
    s.stopService()


def test_the_runtime_provides_what_protocols_and_handlers_may_ask(service):
    assert verifyObject(IClientRuntime, service.runtime)
    assert verifyObject(INodeRuntime, service.runtime)


def test_the_bus_hub_provides_what_the_bus_may_ask(service):
    assert verifyObject(IBusHub, service.runtime.bus)
    assert service.listeners and service.bus_listeners[0].factory.runtime is service.runtime.bus


def test_the_check_can_fail():
    """A provider missing a method or an attribute of its interface fails."""

    class IHalf(Interface):
        def bus_member(node_id):
            """As IBusHub's."""

    @implementer(IHalf)
    class Missing:
        pass

    with pytest.raises(Invalid):
        verifyObject(IHalf, Missing())

    @implementer(IBusHub)
    class NoAttributes:
        def __getattr__(self, name):
            if name.startswith("bus_"):
                return lambda *a: None
            raise AttributeError(name)

    with pytest.raises(Invalid):
        verifyObject(IBusHub, NoAttributes())
