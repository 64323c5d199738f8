"""The node's declared seams: the runtime provides what a client protocol
(RESP, HTTP) may ask (IClientRuntime, which extends the handlers'
INodeRuntime), its bus hub what the bus protocol and links may ask
(IBusHub), both checked with zope.interface.verify on a real node; the
HTTP side asks nothing else of the runtime."""

import json

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import Interface, implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from disque.config import Config
from disque.http import metrics
from disque.http.api import Api
from disque.http.rates import Rates
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


class Declared:
    """A runtime seen through IClientRuntime alone: reading a name the
    interface does not declare fails."""

    def __init__(self, runtime):
        self._runtime = runtime

    def __getattr__(self, name):
        if name not in IClientRuntime.names(all=True):
            raise AttributeError("%s is not declared by IClientRuntime" % name)
        return getattr(self._runtime, name)


def test_the_http_side_reads_the_node_through_the_declared_interface(service):
    """/metrics, the rates sampler and the API's pages ask the runtime only
    what IClientRuntime declares (the node's state through
    disque.commands.views)."""
    runtime = Declared(service.runtime)
    with pytest.raises(AttributeError):
        runtime.node
    job = service.runtime.node.addjob.add(b"q", b"body", 1, 0, -1, 3600, 0, False)
    assert b"\ndisque_jobs 1\n" in metrics.render(runtime)
    assert b'\ndisque_queue_jobs{queue="q"} 1\n' in metrics.render(runtime, lambda name: True)
    rates = Rates(runtime.ctx)
    rates.sample(0)
    rates.sample(1000)
    assert rates.samples[-1]["queued"] == 1
    api = Api(runtime, rates)
    pages = {}
    for path in ([b"node"], [b"nodes"], [b"rates"], [b"queues"], [b"queues", b"q"], [b"jobs", job.id]):
        request = DummyRequest(path)
        request.acl_user = service.runtime.ctx.acl.default
        pages[b"/".join(path[:2])] = json.loads(api.render(request))
    assert pages[b"node"]["jobs"]["queued"] == 1 and pages[b"nodes"]["nodes"][0]["myself"]
    assert pages[b"queues"]["queues"][0]["name"] == "q" and pages[b"rates"]["samples"]
    assert pages[b"queues/q"]["jobs"][0]["id"] == pages[b"jobs/" + job.id]["id"] == job.id.decode()


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
