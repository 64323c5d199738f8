"""The production tooling the project ships, read by the tools that use it.

* ``examples/prometheus/``: ``promtool`` checks the alert rules and the
  scrape configuration and runs the rules' unit tests, which cover every
  alert (each alert made never to fire must fail them).
* A real Prometheus, started with the shipped ``prometheus.yml`` (targets,
  password file and intervals replaced), scrapes a real 3-node cluster
  whose nodes need a password: it sees every node's job metrics, loads the
  shipped rules healthy, and two alerts go pending as they should.
* The alert rules, the Grafana dashboard (``examples/grafana/``) and the
  metric tables of docs/observability.md name only metrics a real node
  exports; every dashboard query runs in that Prometheus and shows data.
* ``examples/systemd/disque.service``: ``systemd-analyze verify`` accepts
  it, it has the keys docs/operations.md promises, and its command starts
  a node that SIGTERM stops within its TimeoutStopSec.
"""

import base64
import calendar
import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import types
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.process import (ROOT, Client, NodeProcess, _die_with_parent, call, free_port, info,
                                   join_nodes, twistd_path, wait_for)
from tests.support.prometheus import PrometheusProcess, have, metric_names

PROM = os.path.join(ROOT, "examples", "prometheus")
RULES = os.path.join(PROM, "disque-rules.yml")
RULES_TEST = os.path.join(PROM, "disque-rules_test.yml")
SCRAPE = os.path.join(PROM, "prometheus.yml")
DASHBOARD = os.path.join(ROOT, "examples", "grafana", "disque-dashboard.json")
UNIT = os.path.join(ROOT, "examples", "systemd", "disque.service")
OBSERVABILITY = os.path.join(ROOT, "docs", "observability.md")
METRICS_CODE = os.path.join(ROOT, "disque", "http", "metrics.py")

PASSWORD = "scrape-secret"
#: Series a node has only while long work runs (its AOF loading or being
#: rewritten), so no scrape of an idle node shows them.
WHILE_WORKING = {"disque_loading_progress_ratio", "disque_loading_eta_seconds",
                 "disque_aof_rewrite_progress_ratio", "disque_aof_rewrite_eta_seconds"}
#: Series Prometheus makes itself for each target.
SCRAPE_SERIES = {"up"}
#: The dashboard's variables, as Grafana would fill them on this cluster.
VARIABLES = {"$__rate_interval": "1m", "$job": "disque", "$instance": ".*", "$queue": ".*"}


def read(path):
    with open(path) as f:
        return f.read()


def alert_rules():
    """{alert name: rule} of the shipped rules file."""
    rules = {}
    for group in yaml.safe_load(read(RULES))["groups"]:
        for rule in group["rules"]:
            assert rule["alert"] not in rules, "two alerts named %s" % rule["alert"]
            rules[rule["alert"]] = rule
    return rules


def promtool(*args, cwd):
    p = subprocess.run([have("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


# --- the rules and the scrape configuration, by promtool ---------------------------

def test_promtool_accepts_the_shipped_rules_and_scrape_config():
    code, out = promtool("check", "rules", "disque-rules.yml", cwd=PROM)
    assert code == 0, out
    assert "SUCCESS: %d rules found" % len(alert_rules()) in out
    # The scrape configuration as shipped, with the rules file it loads.
    code, out = promtool("check", "config", "prometheus.yml", cwd=PROM)
    assert code == 0, out
    assert "SUCCESS: 1 rule files found" in out


def covered(series, alert_labels):
    """True if an alert with ``alert_labels`` is about the input series
    ``series`` (a selector): every label both have agrees."""
    labels = dict(re.findall(r'(\w+)="([^"]*)"', series))
    return all(labels[k] == v for k, v in alert_labels.items() if k in labels)


def test_the_unit_tests_fire_every_alert_and_keep_it_quiet_where_they_should(tmp_path):
    """Every alert has a test group in disque-rules_test.yml with an
    evaluation where it fires (and, while its ``for`` runs or for the
    series that must not fire it, one where it does not) and input
    series that no alert of that evaluation is about: promtool compares
    the whole list of alerts firing, so those series are checked to stay
    quiet.  The tests pass, and fail for each alert made never to fire."""
    rules = alert_rules()
    tests = yaml.safe_load(read(RULES_TEST))
    assert tests["rule_files"] == ["disque-rules.yml"]
    groups = {}
    for group in tests["tests"]:
        for check in group["alert_rule_test"]:
            groups.setdefault(check["alertname"], []).append((group, check))
    assert sorted(groups) == sorted(rules), "alerts without a unit test, or tests of no alert"
    for name, checks in groups.items():
        firing = [(g, c) for g, c in checks if c["exp_alerts"]]
        assert firing, "%s: no evaluation where it fires" % name
        assert any(not c["exp_alerts"] for _, c in checks), "%s: no evaluation where it is quiet" % name
        for group, check in firing:
            alerts = [a["exp_labels"] for a in check["exp_alerts"]]
            assert all(a["severity"] in ("critical", "warning") for a in alerts)
            quiet = [s["series"] for s in group["input_series"]
                     if not any(covered(s["series"], {k: v for k, v in a.items() if k != "severity"})
                                for a in alerts)]
            assert quiet, "%s at %s: every input series fires it; none is checked to stay quiet" % (
                name, check["eval_time"])

    code, out = promtool("test", "rules", "disque-rules_test.yml", cwd=PROM)
    assert code == 0, out
    assert "SUCCESS" in out

    # Each alert made never to fire: its unit test fails, and names it.
    shutil.copy(RULES_TEST, str(tmp_path))
    shipped = yaml.safe_load(read(RULES))
    for name in rules:
        broken = yaml.safe_load(read(RULES))
        for group in broken["groups"]:
            for rule in group["rules"]:
                if rule["alert"] == name:
                    rule["expr"] = "vector(1) == 0"
        assert broken != shipped
        (tmp_path / "disque-rules.yml").write_text(yaml.safe_dump(broken))
        code, out = promtool("test", "rules", "disque-rules_test.yml", cwd=str(tmp_path))
        assert code != 0 and "alertname: %s" % name in out, "%s never firing passes its tests:\n%s" % (name, out)


def test_the_docs_describe_every_shipped_alert_and_keep_no_copy():
    """docs/observability.md's table lists the alerts of the shipped file,
    and the doc holds no rules of its own that could drift from it."""
    doc = read(OBSERVABILITY)
    documented = re.findall(r"^\| `(Disque\w+)` \|", doc, re.M)
    assert sorted(documented) == sorted(alert_rules())
    assert "- alert:" not in doc, "a copy of rules in the doc: point to examples/prometheus/disque-rules.yml"
    for path in ("examples/prometheus/disque-rules.yml", "examples/prometheus/disque-rules_test.yml",
                 "examples/prometheus/prometheus.yml", "examples/grafana/disque-dashboard.json"):
        assert "`%s`" % path in doc


def test_metric_names_reads_promql():
    """The names the checks below compare with a scrape (the helper of
    tests/support/prometheus.py)."""
    assert metric_names('up{job="disque"} == 0') == {"up"}
    assert metric_names("histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{le!='1'}[5m]))) > 1e3") == {
        "a_bucket"}
    assert metric_names('sum without (queue) (rate(a_total[$__rate_interval])) > 0.1 * on (instance) group_left '
                        'max by (instance) (b offset 5m) unless c{d=~"e|f"} > bool count_values("x", g)') == {
        "a_total", "b", "c", "g"}
    assert metric_names("topk(10, sum(x:y_z)) / ignoring(q) w") == {"x:y_z", "w"}


# --- a real Prometheus scraping a real cluster ----------------------------------------

class ScrapedNode(NodeProcess):
    """A node with requirepass and its HTTP side on; its RESP clients AUTH."""

    def __init__(self, workdir):
        self.http_port = free_port()
        super().__init__(workdir, args=["--requirepass", PASSWORD, "--set", "http-port=%d" % self.http_port,
                                        "--appendonly", "yes"])
        self.target = "127.0.0.1:%d" % self.http_port

    def client(self):
        c = super().client()
        assert c.call("AUTH", PASSWORD) == b"OK"
        return c

    def scrape(self):
        """The names of the samples of its /metrics."""
        request = urllib.request.Request("http://%s/metrics" % self.target, headers={
            "Authorization": "Basic " + base64.b64encode(b"prometheus:" + PASSWORD.encode()).decode()})
        with urllib.request.urlopen(request, timeout=10) as reply:
            text = reply.read().decode()
        return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def prometheus_config(targets, password_file):
    """The shipped prometheus.yml for the test: its targets, password file
    and intervals replaced and its rules file named by its path; nothing
    else changes (the job name, the user name)."""
    config = yaml.safe_load(read(SCRAPE))
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["rule_files"] == ["disque-rules.yml"]
    config["rule_files"] = [RULES]
    [job] = config["scrape_configs"]
    [static] = job["static_configs"]
    static["targets"] = targets
    job["basic_auth"]["password_file"] = password_file
    return config


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """Three nodes in a full mesh with some jobs, and a Prometheus scraping
    them with the shipped configuration and rules; all stopped after the
    module's tests."""
    have("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    nodes = join_nodes([ScrapedNode(tmp / ("node%d" % i)) for i in range(3)])
    prom = None
    try:
        # Node i queues i + 1 jobs in "orders", one copy each (REPLICATE 1):
        # its own counts.  Node 2 hands one out and gets its ACK; node 0
        # holds a job in a queue paused "out".
        for i, node in enumerate(nodes):
            for k in range(i + 1):
                call(node, "ADDJOB", "orders", "order-%d-%d" % (i, k), "0", "REPLICATE", "1")
        [[_, job_id, _]] = call(nodes[2], "GETJOB", "FROM", "orders")
        assert call(nodes[2], "ACKJOB", job_id) == 1
        assert call(nodes[0], "PAUSE", "held", "out") == b"out"
        call(nodes[0], "ADDJOB", "held", "kept", "0", "REPLICATE", "1")
        # One rewrite, for disque_aof_last_rewrite_duration_seconds.
        call(nodes[0], "BGREWRITEAOF")
        wait_for(lambda: node_info(nodes[0], "persistence")["aof_rewrite_in_progress"] == "0",
                 timeout=15, what="the AOF rewrite")
        password_file = tmp / "disque.password"
        password_file.write_text(PASSWORD + "\n")
        config = tmp / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config([n.target for n in nodes], str(password_file))))
        prom = PrometheusProcess(tmp / "prometheus", str(config)).start()
        targets = {n.target: 1.0 for n in nodes}
        try:
            wait_for(lambda: by_instance(prom, 'up{job="disque"}') == targets, timeout=30, interval=0.5,
                     what="Prometheus scraping the three nodes")
        except AssertionError as e:
            seen = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in prom.api("targets")["activeTargets"]]
            raise AssertionError("%s\ntargets: %s\n%s" % (e, seen, prom.log()))
        yield types.SimpleNamespace(nodes=nodes, prom=prom, scraped=time.time())
    finally:
        if prom is not None:
            prom.stop()
        for node in nodes:
            node.kill()


def node_info(node, section="default"):
    c = node.client()
    try:
        return info(c, section)
    finally:
        c.close()


def by_instance(prom, expr):
    return {r["metric"]["instance"]: float(r["value"][1]) for r in prom.query(expr)}


def test_prometheus_scrapes_the_job_metrics_of_every_node(monitored):
    nodes, prom = monitored.nodes, monitored.prom
    addresses = [n.target for n in nodes]
    registered = [int(node_info(n)["registered_jobs"]) for n in nodes]
    expected = {
        'up{job="disque"}': [1, 1, 1],  # the password file works: a scrape without it gets 401
        'disque_queue_jobs{queue="orders"}': [1, 2, 2],
        'disque_queue_added_total{queue="orders"}': [1, 2, 3],
        'disque_queue_removed_total{queue="orders"}': [0, 0, 1],
        "disque_acks_total": [0, 0, 1],
        "disque_jobs": registered,
        'disque_jobs_by_state{state="queued"}': [2, 2, 2],
        'disque_queue_paused{queue="held", state="out"}': [1],
        "disque_cluster_reachable_nodes": [2, 2, 2],
        "disque_cluster_known_nodes": [3, 3, 3],
        "disque_aof_enabled": [1, 1, 1],
    }
    last = {}

    def seen():
        for expr, values in expected.items():
            last[expr] = by_instance(prom, expr)
            if last[expr] != dict(zip(addresses, values)):
                return False
        return True

    try:
        wait_for(seen, timeout=30, interval=0.5, what="the metrics of the three nodes in Prometheus")
    except AssertionError:
        raise AssertionError("expected %s over %s, last seen %s\n%s" % (expected, addresses, last, prom.log()))
    assert registered == [2, 2, 2]
    targets = prom.api("targets")["activeTargets"]
    assert sorted(t["scrapeUrl"] for t in targets) == sorted("http://%s/metrics" % a for a in addresses)
    assert all(t["health"] == "up" and t["labels"]["job"] == "disque" for t in targets)


def test_prometheus_loads_the_shipped_rules_healthy(monitored):
    """Every rule, evaluated on the nodes' series (an error such as a
    many-to-many match shows only then), is healthy."""
    prom = monitored.prom
    rules = alert_rules()

    def evaluated():
        loaded = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        return loaded if loaded and all(timestamp(r["lastEvaluation"]) > monitored.scraped for r in loaded) else None

    loaded = wait_for(evaluated, timeout=20, interval=0.5, what="the rules evaluated on the nodes' series")
    assert sorted(r["name"] for r in loaded) == sorted(rules)
    for rule in loaded:
        assert rule["type"] == "alerting"
        assert (rule["health"], rule.get("lastError", "")) == ("ok", ""), rule
        assert rule["duration"] == seconds(rules[rule["name"]].get("for", "0"))
        assert rule["labels"]["severity"] == rules[rule["name"]]["labels"]["severity"]


def timestamp(text):
    """Seconds since the epoch of an RFC 3339 time of Prometheus (UTC, up to
    nanoseconds: "2024-05-01T10:00:00.123456789Z")."""
    whole, fraction = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", text).groups()
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(fraction or 0)


def seconds(duration):
    """A duration of Prometheus ("5m") or systemd ("30", "30s") in seconds."""
    number, unit = re.fullmatch(r"(\d+)([smh]?)", duration).groups()
    return int(number) * {"": 1, "s": 1, "m": 60, "h": 3600}[unit]


def exported_names(nodes):
    """The sample names of a real scrape of every node, and the names of
    the series that only appear while long work runs (each is in the
    code, and in no scrape here: the list cannot go stale)."""
    names = set().union(*(n.scrape() for n in nodes))
    code = read(METRICS_CODE)
    for name in WHILE_WORKING:
        assert '"%s"' % name in code and name not in names, name
    return names | WHILE_WORKING | SCRAPE_SERIES


def dashboard_queries():
    """[(where, PromQL)]: every target of every panel (rows' own panels
    included) and the selector of every variable's label_values()."""
    board = json.loads(read(DASHBOARD))
    found = []

    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            if panel["type"] == "row":
                continue
            assert panel.get("targets"), "panel %r has no query" % panel["title"]
            for target in panel["targets"]:
                found.append(("panel %r" % panel["title"], target["expr"]))

    walk(board["panels"])
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.+), *(\w+)\)", query)
            assert match, "variable %s: %s" % (var["name"], query)
            found.append(("variable %s (label %s)" % (var["name"], match.group(2)), match.group(1)))
    return found


def test_the_dashboard_is_well_formed():
    """What Grafana needs to show every panel where it belongs: unique
    panel IDs, panels in the 24 columns without overlapping, every query on
    the ``datasource`` variable with its own refId, and every variable a
    query uses defined."""
    board = json.loads(read(DASHBOARD))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert variables == {"datasource", "job", "instance", "queue"}
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, "%r overlaps %r" % (panel["title"], cells[(x, y)])
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= variables, (panel["title"], used)


def test_rules_dashboard_and_docs_name_only_metrics_a_node_exports(monitored):
    exported = exported_names(monitored.nodes)
    assert {"disque_jobs", "disque_queue_jobs", "disque_cluster_peer_up", "disque_aof_size_bytes",
            "disque_aof_last_rewrite_duration_seconds", "disque_getjob_wait_seconds_bucket"} <= exported
    unknown = {}
    for name, rule in alert_rules().items():
        unknown.update({"alert %s" % name: metric_names(rule["expr"]) - exported})
    for where, expr in dashboard_queries():
        unknown.update({"%s: %s" % (where, expr): metric_names(expr) - exported})
    assert {k: v for k, v in unknown.items() if v} == {}
    # The metric tables of docs/observability.md (a histogram by its name).
    doc = read(OBSERVABILITY)
    documented = {name for row in re.findall(r"^\| (`disque_[^|]*)\|", doc, re.M)
                  for name in re.findall(r"`(disque_\w+)`", row)}
    families = exported | {n[:-len("_bucket")] for n in exported if n.endswith("_bucket")}
    assert sorted(documented - families) == [], "the docs name metrics no node exports"
    undocumented = {n for n in exported - SCRAPE_SERIES if not n.endswith(("_bucket", "_sum", "_count"))}
    assert sorted(undocumented - documented) == [], "metrics the docs' tables do not name"


def test_every_dashboard_query_runs_and_shows_data(monitored):
    """Each query, its variables filled as Grafana would, is valid PromQL
    for a real Prometheus and returns series on this cluster (except those
    of series that only exist while long work runs)."""
    prom = monitored.prom
    queries = []
    for where, expr in dashboard_queries():
        for var, value in VARIABLES.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, "%s: a variable the test does not fill: %s" % (where, expr)
        queries.append((where, expr))
    empty = {}

    def all_shown():
        empty.clear()
        for where, expr in queries:
            result = prom.query(expr)  # a query Prometheus cannot parse fails here
            if not result and not metric_names(expr) & WHILE_WORKING:
                empty[where] = expr
            if where.startswith("variable") and result:
                label = re.search(r"label (\w+)", where).group(1)
                assert all(label in r["metric"] for r in result), (where, result)
        return not empty

    try:
        wait_for(all_shown, timeout=30, interval=1, what="data for every dashboard query")
    except AssertionError:
        raise AssertionError("queries without data: %s" % empty)


def test_alerts_go_pending_on_the_live_cluster(monitored):
    """DisqueConsumersStalled is pending for "orders" on every node (nothing
    takes its jobs out) and not for the paused queue; a killed node makes
    DisqueNodeDown pending for its address.  (Kills a node: the last test
    of the module.)"""
    nodes, prom = monitored.nodes, monitored.prom

    def pending(name):
        return {(a["labels"].get("instance"), a["labels"].get("queue")) for a in prom.api("alerts")["alerts"]
                if a["labels"]["alertname"] == name and a["state"] == "pending"}

    stalled = {(n.target, "orders") for n in nodes}
    wait_for(lambda: pending("DisqueConsumersStalled") == stalled, timeout=20, interval=0.5,
             what="DisqueConsumersStalled pending for orders on every node")
    assert pending("DisqueNodeDown") == set()
    nodes[2].kill()
    wait_for(lambda: pending("DisqueNodeDown") == {(nodes[2].target, None)}, timeout=20, interval=0.5,
             what="DisqueNodeDown pending for the killed node")


# --- the systemd unit ---------------------------------------------------------------

def unit():
    parser = configparser.ConfigParser(strict=True, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(read(UNIT))
    return parser


def test_the_systemd_unit_is_valid_and_hardened(tmp_path):
    u = unit()
    service = u["Service"]
    command = shlex.split(service["ExecStart"])
    assert os.path.basename(command[0]) == "twistd"
    assert command[1:] == ["-n", "--pidfile=", "disque", "--config", "/etc/disque/disque.conf"]
    assert service["User"] == "disque" and service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert service["WorkingDirectory"] in service["ReadWritePaths"].split()
    assert service["StateDirectory"] == "disque" and service["WorkingDirectory"] == "/var/lib/disque"
    assert int(service["LimitNOFILE"]) > 10000  # maxclients' default, and the bus links
    assert seconds(service["TimeoutStopSec"]) >= 10
    assert service["CapabilityBoundingSet"] == ""
    assert u["Install"]["WantedBy"] == "multi-user.target"
    # systemd's own check, with the twistd of this checkout: it reports
    # unknown keys and bad values (exit 0), a missing program (exit 1).
    path = shutil.which("systemd-analyze")
    assert path, "systemd-analyze not installed (apt-get install systemd; .ci/run does it)"
    (tmp_path / "disque.service").write_text(read(UNIT).replace(command[0], twistd_path()))
    p = subprocess.run([path, "verify", "disque.service"], cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode, p.stdout + p.stderr) == (0, "")


def test_the_systemd_units_command_runs_a_node_that_sigterm_stops(tmp_path):
    """ExecStart, with this checkout's twistd and a copy of
    examples/disque.conf (on a free port) for /etc/disque/disque.conf, run
    in WorkingDirectory's stead: the node answers, and SIGTERM (KillSignal)
    stops it cleanly within TimeoutStopSec."""
    service = unit()["Service"]
    command = shlex.split(service["ExecStart"])
    port = free_port()
    conf = (tmp_path / "disque.conf")
    text = read(os.path.join(ROOT, "examples", "disque.conf"))
    assert text.count("\nport 7711\n") == 1
    conf.write_text(text.replace("\nport 7711\n", "\nport %d\n" % port))
    command = [twistd_path()] + [str(conf) if a == "/etc/disque/disque.conf" else a for a in command[1:]]
    proc = subprocess.Popen(command, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent)
    try:
        def answers():
            try:
                c = Client(port)
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
                return False
            try:
                return c.call("PING") == b"PONG"
            finally:
                c.close()

        wait_for(answers, timeout=30, interval=0.1, what="the node of the unit's command")
        assert service["KillSignal"] == "SIGTERM"
        proc.send_signal(signal.SIGTERM)
        started = time.time()
        # The node stops within its bound and exits with status 0 (docs/config.md,
        # "Starting and stopping"): a clean stop for systemd.
        assert proc.wait(seconds(service["TimeoutStopSec"])) == 0
        output = proc.stdout.read().decode(errors="replace")
        assert "Received SIGTERM, shutting down" in output and "Server Shut Down." in output, output
        assert time.time() - started < 10
        assert not os.path.exists(tmp_path / "twistd.pid")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
