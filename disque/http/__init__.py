"""The node's HTTP side (``http-port``; docs/observability.md).

The factory of the built-in ``default`` frontend lives here, in a module
that imports nothing heavy, because the dropin lists it; ``make`` imports
twisted.web when a node with an HTTP port is built.
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
