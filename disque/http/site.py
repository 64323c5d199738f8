"""The resources of the HTTP side: the ``default`` frontend's tree, and the
site with the ``requirepass`` check the service puts in front of any
frontend."""

import base64
import hmac

from twisted.web import resource, server
from zope.interface import implementer

from ..interfaces import IHTTPFrontend
from . import metrics
from .api import Api
from .dashboard import DashboardRoot
from .rates import INTERVAL, Rates


class MetricsResource(resource.Resource):
    """``GET /metrics``: :func:`disque.http.metrics.render`."""

    isLeaf = True

    def __init__(self, runtime):
        super().__init__()
        self.runtime = runtime

    def render_GET(self, request):
        request.setHeader(b"content-type", metrics.CONTENT_TYPE)
        return metrics.render(self.runtime)


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
    rates = Rates(runtime.node)
    sampler = TimerService(INTERVAL, lambda: rates.sample(int(runtime.reactor.seconds() * 1000)))
    sampler.clock = runtime.reactor
    sampler.setServiceParent(service)
    return rates


class PasswordSite(server.Site):
    """The site of the HTTP side: every request needs ``requirepass``
    while it is set (read at each request, so CONFIG SET takes effect at
    once), as HTTP Basic credentials (any user name; what Prometheus'
    ``basic_auth`` sends) or a Bearer token; otherwise 401.  A wrong
    password is counted and logged like a wrong AUTH (``auth_failures``)."""

    def __init__(self, root, runtime):
        super().__init__(root)
        self.runtime = runtime

    def getResourceFor(self, request):
        if not self._allowed(request):
            return _Unauthorized()
        return super().getResourceFor(request)

    def _allowed(self, request) -> bool:
        password = self.runtime.config["requirepass"]
        if not password:
            return True
        header = request.getHeader(b"authorization") or b""
        scheme, _, value = header.partition(b" ")
        given = None
        if scheme.lower() == b"bearer":
            given = value.strip()
        elif scheme.lower() == b"basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).partition(b":")[2]
            except ValueError:
                given = None
        expected = password.encode() if isinstance(password, str) else password
        if given is not None and hmac.compare_digest(given, expected):
            return True
        if given is not None:
            self.runtime.client_auth_failed(getattr(request.getClientAddress(), "host", "?"))
        return False


class _Unauthorized(resource.Resource):
    isLeaf = True

    def render(self, request):
        request.setResponseCode(401)
        request.setHeader(b"www-authenticate", b'Basic realm="disque"')
        if request.path.startswith(b"/api/"):  # API clients get JSON, errors included
            request.setHeader(b"content-type", b"application/json")
            return b'{"error":"-NOAUTH Authentication required."}'
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"-NOAUTH Authentication required.\n"
