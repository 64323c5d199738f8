"""The resources of the ``default`` frontend: the dashboard's tree, the
JSON API and the metrics (the site in front of them, with who may do what,
is disque.http.access)."""

from twisted.web import resource
from zope.interface import implementer

from ..interfaces import IHTTPFrontend
from . import metrics
from .api import Api
from .dashboard import DashboardRoot
from .dispatch import refused
from .rates import INTERVAL, Rates

#: What reading the metrics needs: what INFO needs (@inspect).
INFO = [b"INFO"]


class MetricsResource(resource.Resource):
    """``GET /metrics``: :func:`disque.http.metrics.render`, for a user who
    may run INFO; a user limited to some queues gets the series of those
    queues only (403 without INFO)."""

    isLeaf = True

    def __init__(self, runtime):
        super().__init__()
        self.runtime = runtime

    def render_GET(self, request):
        no = refused(self.runtime, request, INFO)
        if no is not None:
            request.setResponseCode(403)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return no.rstrip(b"\r\n") + b"\n"
        user = request.acl_user
        request.setHeader(b"content-type", metrics.CONTENT_TYPE)
        return metrics.render(self.runtime, None if user.all_queues else user.may_queue)


@implementer(IHTTPFrontend)
class DefaultFrontend:
    def resource(self, service):
        root = DashboardRoot()  # the dashboard's page at /, its files under /static/
        root.putChild(b"metrics", MetricsResource(service.runtime))
        root.putChild(b"api", Api(service.runtime, sampled_rates(service)))
        return root


def sampled_rates(service):
    """The dashboard's :class:`~disque.http.rates.Rates` of ``service``'s
    node, sampled every second while the service runs."""
    from twisted.application.internet import TimerService

    runtime = service.runtime
    rates = Rates(runtime.ctx)
    sampler = TimerService(INTERVAL, lambda: rates.sample(int(runtime.reactor.seconds() * 1000)))
    sampler.clock = runtime.reactor
    sampler.setServiceParent(service)
    return rates
