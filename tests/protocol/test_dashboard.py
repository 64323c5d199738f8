"""The dashboard's resources in memory (disque/http/dashboard.py): content
types, caching, the Content-Security-Policy it runs under, and a guard on
the page's script (no HTML made from strings).  The page itself runs in a real browser in
tests/process/test_e2e_dashboard.py."""

import os
import re

from twisted.web.resource import getChildForRequest
from twisted.web.test.requesthelper import DummyRequest

from disque.http import access, dashboard
from disque.http.dashboard import STATIC, DashboardRoot


def get(path, headers=None, root=None):
    request = DummyRequest(path[1:].encode().split(b"/"))
    for name, value in (headers or {}).items():
        request.requestHeaders.setRawHeaders(name, [value])
    resource = getChildForRequest(root or DashboardRoot(), request)
    body = resource.render(request)
    header = request.responseHeaders.getRawHeaders
    return request.responseCode or 200, {k: header(k, [None])[0] for k in
                                         ("content-type", "cache-control", "etag", "content-security-policy",
                                          "x-content-type-options")}, body


def test_the_page_at_the_root_and_its_files():
    for path in ("/", "/index.html"):
        code, headers, body = get(path)
        assert code == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert body.startswith(b"<!doctype html>")
    for path, kind in (("/static/app.js", "text/javascript"), ("/static/app.css", "text/css"),
                       ("/static/favicon.svg", "image/svg+xml")):
        code, headers, body = get(path)
        assert code == 200 and headers["content-type"].startswith(kind) and body
        with open(os.path.join(STATIC, path.rsplit("/", 1)[1]), "rb") as f:
            assert body == f.read()


def test_caching_revalidates_with_the_etag():
    code, headers, _ = get("/static/app.js")
    assert headers["cache-control"] == "no-cache" and headers["etag"].startswith('"')
    code, _, body = get("/static/app.js", {"If-None-Match": headers["etag"]})
    assert code == 304 and body == b""
    assert get("/static/app.js", {"If-None-Match": '"other"'})[0] == 200


def test_the_content_security_policy_and_unknown_paths():
    csp = access.CSP.decode()  # on every response, set by the site (tests/protocol/test_http_access.py)
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe-inline" not in csp
    for path in ("/nothing", "/static/", "/static/nothing.js", "/static/../dashboard.py"):
        code, headers, body = get(path)
        assert code == 404 and b"<" not in body, path


def test_the_page_refers_only_to_files_the_node_serves():
    with open(os.path.join(STATIC, "index.html")) as f:
        html = f.read()
    refs = re.findall(r'(?:src|href)="([^"#]+)"', html)
    local = [r for r in refs if r.startswith("static/")]
    assert sorted(set(r.split("/", 1)[1] for r in local)) == sorted(dashboard.Static.FILES)
    assert all(r.startswith("static/") or r in ("metrics", "api/node") for r in refs), refs  # no CDN
    assert "<script>" not in html and "style=" not in html  # nothing inline: the CSP forbids it


def test_the_script_never_makes_html_from_strings():
    with open(os.path.join(STATIC, "app.js")) as f:
        script = f.read()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "setTimeout(\"", "http://", "https://"):
        assert sink not in script, sink
