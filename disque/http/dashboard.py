"""The dashboard: a single page served by the node itself at ``/``.

The page (``static/index.html``, ``app.js``, ``app.css``) is plain HTML,
JavaScript and CSS with no build step and nothing fetched from elsewhere:
it polls the JSON API (``/api``, :mod:`disque.http.api`) of the node that
served it.  The files are read once, when the HTTP side is built, and
served from memory with an ``ETag``: ``Cache-Control: no-cache`` makes the
browser ask again each time (a 304 when nothing changed), so a node
upgraded in place serves its new page at the next reload.

Every response of the HTTP side carries a Content-Security-Policy allowing
only this origin's scripts, styles and requests (no inline script, no
``eval``; :data:`disque.http.access.CSP`, set by the site): with the page's
own rule of never putting API data into HTML, user data (queue names, job
bodies) cannot run as code.
"""

import hashlib
import os

from twisted.web import resource

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}

class StaticFile(resource.Resource):
    """One file of ``static/``, kept in memory."""

    isLeaf = True

    def __init__(self, name: str):
        super().__init__()
        with open(os.path.join(STATIC, name), "rb") as f:
            self.body = f.read()
        self.content_type = TYPES[os.path.splitext(name)[1]]
        self.etag = b'"' + hashlib.sha256(self.body).hexdigest()[:20].encode() + b'"'

    def render_GET(self, request):
        request.setHeader(b"content-type", self.content_type)
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"etag", self.etag)
        match = request.getHeader(b"if-none-match")
        if match and self.etag in [m.strip() for m in match.split(b",")]:
            request.setResponseCode(304)
            return b""
        return self.body  # HEAD: twisted.web renders GET and sends no body


class _NotFound(resource.Resource):
    isLeaf = True

    def render(self, request):
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"Not found: the dashboard is at /, the API under /api/, the metrics at /metrics\n"


class Static(resource.Resource):
    """``/static/``: the page's script, style sheet and icon."""

    FILES = ("app.js", "app.css", "favicon.svg")

    def __init__(self):
        super().__init__()
        for name in self.FILES:
            self.putChild(name.encode(), StaticFile(name))

    def getChild(self, path, request):
        return _NotFound()

    def render(self, request):
        return _NotFound().render(request)


class DashboardRoot(resource.Resource):
    """The root of the HTTP side: the page at ``/`` (and ``/index.html``),
    its files under ``/static/``; the frontend adds ``/metrics`` and
    ``/api`` with ``putChild``."""

    def __init__(self):
        super().__init__()
        self.page = StaticFile("index.html")
        self.putChild(b"static", Static())
        self.putChild(b"index.html", self.page)

    def getChild(self, path, request):
        if path == b"":
            return self.page
        return _NotFound()

    def render(self, request):  # "/" without the trailing slash never reaches here; kept for safety
        return self.page.render(request)
