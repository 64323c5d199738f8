"""The node's HTTP side (``http-port``; docs/observability.md).

The factory of the built-in ``default`` frontend lives here, in a module
that imports nothing heavy, because the dropin lists it; ``make`` imports
twisted.web when a node with an HTTP port is built.  So does
:func:`site_url`, the address the node's ready line gives.
"""

from zope.interface import implementer

from ..interfaces import IHTTPFrontendFactory
from ..plugins import parse_args


@implementer(IHTTPFrontendFactory)
class DefaultFrontendFactory:
    """``default``: the dashboard at ``/``, the JSON API under ``/api``,
    Prometheus metrics at ``/metrics``."""

    name = "default"
    description = "The dashboard at /, the JSON API under /api/, Prometheus metrics at /metrics."
    argStringFormat = "No arguments."

    def make(self, argstring, config):
        parse_args(argstring, {})
        from .site import DefaultFrontend

        return DefaultFrontend()


default_frontend = DefaultFrontendFactory()

#: ``http-bind`` values meaning every interface, and the loopback address
#: to give for them (the node answers on loopback there too).
WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def site_url(bind: str, port: int, tls: bool) -> str:
    """Where a browser on the node's host finds the HTTP side listening on
    ``bind`` and ``port``: ``http://127.0.0.1:7790/``, ``https://`` with
    ``http-tls``, an IPv6 address in brackets; for a wildcard bind, the
    loopback address, followed by `` (listening on all interfaces)``."""
    url = http_url(WILDCARDS.get(bind, bind), port, tls)
    return url + " (listening on all interfaces)" if bind in WILDCARDS else url


def http_url(host: str, port: int, tls: bool) -> str:
    """``http(s)://host:port/``, an IPv6 address in brackets."""
    shown = "[%s]" % host if ":" in host else host
    return "%s://%s:%d/" % ("https" if tls else "http", shown, port)
