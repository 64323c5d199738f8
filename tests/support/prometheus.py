"""A real Prometheus server for the process tests (Debian's ``prometheus``
package; ``.ci/run`` installs it), and the metric names a PromQL
expression reads.

:class:`PrometheusProcess` runs ``prometheus`` on 127.0.0.1 with its own
storage in the test's directory, and dies with the test process (as the
nodes do, PR_SET_PDEATHSIG); ``stop()`` ends it, and shows its log if asked.
"""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from .ports import free_port
from .process import _die_with_parent, read_log


def have(tool):
    """The path of ``tool`` (``prometheus``, ``promtool``), or a failure
    saying how to get it: the tests that need it do not skip."""
    path = shutil.which(tool)
    assert path, "%s not installed (apt-get install prometheus; .ci/run does it)" % tool
    return path


class PrometheusProcess:
    """``prometheus --config.file=<config>`` on 127.0.0.1:<a free port>."""

    def __init__(self, workdir, config):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.config = config
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.logpath = os.path.join(self.workdir, "prometheus.log")
        self.proc = None

    def start(self, timeout=30.0):
        cmd = [have("prometheus"), "--config.file=%s" % self.config,
               "--storage.tsdb.path=%s" % os.path.join(self.workdir, "data"),
               "--web.listen-address=127.0.0.1:%d" % self.port]
        with open(self.logpath, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited with %s:\n%s" % (self.proc.returncode, self.log()))
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("prometheus not ready within %.0f s:\n%s" % (timeout, self.log()))

    def log(self):
        return read_log(self.logpath)

    def stop(self, timeout=10):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def api(self, path, **params):
        """The ``data`` of a successful API reply (``/api/v1/<path>``); an
        error reply raises AssertionError with Prometheus' words."""
        url = "%s/api/v1/%s" % (self.url, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        assert body["status"] == "success", "%s: %s" % (url, body)
        return body["data"]

    def query(self, expr):
        """The result of an instant query: [{"metric": {...}, "value": [t, "v"]}]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]


# --- the metric names of a PromQL expression ---------------------------------------

_TOKEN = re.compile(r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]*|0x[0-9a-fA-F]+)
  | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE)

# Words that are not metric names where a name may stand.
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "offset", "atan2", "inf", "nan"}
# Followed by a list of label names in parentheses.
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def metric_names(expr):
    """The metric names ``expr`` (PromQL) selects: the names that are
    neither functions nor aggregations (a name before ``(``), keywords,
    label names (in ``{...}`` and after ``by``, ``on``...), strings nor
    numbers and durations."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr) if m.lastgroup != "space"]
    names = set()
    braces = brackets = 0
    skip_list = False  # inside the label list after by, on, ...
    for i, (kind, text) in enumerate(tokens):
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "other":
            if text == "{":
                braces += 1
            elif text == "}":
                braces -= 1
            elif text == "[":
                brackets += 1
            elif text == "]":
                brackets -= 1
            elif text == ")" and skip_list:
                skip_list = False
            continue
        if kind != "name" or braces or brackets or skip_list:
            continue
        if text in _GROUPING:
            skip_list = following == "("
            continue
        if text in _KEYWORDS or following in ("(", "by", "without"):  # a function, an aggregation
            continue
        names.add(text)
    assert braces == 0 and brackets == 0, "unbalanced expression: %r" % expr
    return names
