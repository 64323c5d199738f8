"""The dashboard page in a real headless Chromium (Debian's chromium and
chromium-driver, driven by tests/support/webdriver.py) against real nodes: the
password is required, the page shows the queues made over RESP, a click
pauses a queue (QSTAT agrees), the queue view lists its jobs, a 3-node
cluster shows a killed node down, another shows the queues summed over
its nodes with federation's moves and a killed node left out and named,
and a job added over RESP appears without a reload.

Screenshots are saved under ``$DISQUE_ARTIFACTS`` (default ``.artifacts/``
in the repository); their paths are printed in the test output.
"""

import base64
import json
import os
import time
import urllib.error
import urllib.request

import pytest

from tests.support import webdriver
from tests.support.process import ROOT, NodeProcess, free_port, wait_for, wait_full_mesh

PASSWORD = "secret"
AUTH = "Basic " + base64.b64encode(("operator:" + PASSWORD).encode()).decode()


def artifacts():
    path = os.environ.get("DISQUE_ARTIFACTS") or os.path.join(ROOT, ".artifacts")
    os.makedirs(path, exist_ok=True)
    return path


def saved(capsys, browser, name, full_page=False):
    """A screenshot kept after the run, its path printed."""
    path = browser.screenshot(os.path.join(artifacts(), name), full_page=full_page)
    with capsys.disabled():
        print("\nscreenshot: %s" % path)
    return path


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    reason = webdriver.available()
    if reason:
        pytest.skip(reason)
    d = webdriver.ChromeDriver(tmp_path_factory.mktemp("chromedriver")).start()
    yield d
    d.stop()  # sessions, chromedriver, and any browser left behind


@pytest.fixture
def sessions(driver, tmp_path):
    """Make browser sessions; each is closed after the test, with a last
    screenshot in the test's directory (what the page showed on a failure)."""
    made = []

    def make(*args, **kw):
        s = driver.session(*args, **kw)
        made.append(s)
        return s

    yield make
    for i, s in enumerate(made):
        try:
            s.screenshot(str(tmp_path / ("last-%d.png" % i)))
        except Exception:  # a failing test's browser may be gone: nothing to show
            pass
        s.quit()


def http(port, path, auth=None):
    """(status, headers, body) of a GET with urllib."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def row(name):
    return 'tr[data-queue="%s"]' % name


def qstat(client, queue):
    reply = client.call("QSTAT", queue)
    return dict(zip([k.decode() for k in reply[::2]], reply[1::2]))


def test_password_required_then_pause_and_queue_view(tmp_path, sessions, capsys):
    port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port, "--requirepass", PASSWORD]).start()
    try:
        c = node.client()
        assert c.call("AUTH", PASSWORD) == b"OK"
        ids = [c.call("ADDJOB", "orders", "order %d" % i, "0").decode() for i in range(4)]
        ids.append(c.call("ADDJOB", "orders", '<img src=x onerror="window.pwned=1">', "0").decode())
        c.call("ADDJOB", "mail", "m1", "0")
        c.call("ADDJOB", "mail", "m2", "0")
        c.call("ADDJOB", "<b>html</b>", "x", "0")

        # Without the password: 401 with a Basic challenge, for the page, its files and the API.
        for path in ("/", "/static/app.js", "/api/queues"):
            status, headers, _ = http(port, path)
            assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="disque"', path
        assert http(port, "/", auth="Basic " + base64.b64encode(b"operator:wrong").decode())[0] == 401
        status, headers, body = http(port, "/", auth=AUTH)
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert "script-src 'self'" in headers["Content-Security-Policy"] and b"static/app.js" in body
        status, headers, _ = http(port, "/static/app.js", auth=AUTH)
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")

        browser = sessions(1280, 900)
        url = "http://127.0.0.1:%d/" % port
        browser.get(url)
        assert browser.js("return document.getElementById('queue-table')") is None  # refused: no page

        browser.authorize(AUTH)  # every request of the tab carries the password from now on
        browser.get(url)
        browser.wait("return document.querySelector(arguments[0]) && document.querySelector(arguments[1])",
                     row("orders"), row("mail"), what="the queues made over RESP")
        assert browser.text(row("orders") + " td:nth-child(2)") == "5"
        assert browser.text(row("mail") + " td:nth-child(2)") == "2"
        # A queue name is text, never markup.
        assert browser.js("return document.querySelector(arguments[0]).querySelector('b')", row("<b>html</b>")) is None
        assert browser.text(row("<b>html</b>") + " a.qlink") == "<b>html</b>"
        assert browser.js("return document.getElementById('actions-notice').hidden") is True
        assert browser.enabled(row("orders") + ' button[data-state="out"]')

        browser.click(row("orders") + ' button[data-state="out"]')
        browser.wait("return document.querySelector(arguments[0]).dataset.paused === 'out'", row("orders"))
        assert browser.text(row("orders") + " td.pstate") == "out"
        assert qstat(c, "orders")["pause"] == b"out"
        saved(capsys, browser, "dashboard-paused.png")
        browser.click(row("orders") + ' button[data-state="none"]')
        browser.wait("return document.querySelector(arguments[0]).dataset.paused === 'none'", row("orders"))
        assert qstat(c, "orders")["pause"] == b"none"

        # The queue view: the jobs, oldest first, with their counters.
        c.call("GETJOB", "FROM", "orders")
        c.call("NACK", ids[0])
        browser.click(row("orders") + " a.qlink")
        browser.wait("return document.querySelectorAll('#job-table tr[data-job]').length === 5", what="5 jobs")
        shown = browser.js("return Array.from(document.querySelectorAll('#job-table tr[data-job]'))"
                           ".map(tr => tr.dataset.job)")
        assert shown == [job[1].decode() for job in c.call("QPEEK", "orders", "5")]
        nacked = '#job-table tr[data-job="%s"]' % ids[0]
        browser.wait("return document.querySelector(arguments[0]).children[3].textContent === '1'", nacked,
                     what="the NACK counted")
        deliveries = dict(zip(*[iter(c.call("SHOW", ids[0]))] * 2))[b"additional-deliveries"]
        assert browser.text(nacked + " td:nth-child(5)") == str(deliveries)
        assert browser.text("#q-name") == "orders"
        evil = '#job-table tr[data-job="%s"] .preview' % ids[4]
        assert browser.text(evil) == '<img src=x onerror="window.pwned=1">'
        assert browser.js("return document.querySelectorAll('#job-table img').length === 0 && !window.pwned")
        saved(capsys, browser, "dashboard-queue.png")

        # A job's details, then delete it (two taps) and requeue another.
        browser.click('#job-table tr[data-job="%s"] button.jobid' % ids[1])
        browser.wait("return document.getElementById('jd-body').textContent === 'order 1'")
        browser.click('#job-table tr[data-job="%s"] button.delete' % ids[1])
        browser.click('#job-table tr[data-job="%s"] button.delete' % ids[1])
        browser.wait("return !document.querySelector(arguments[0])", '#job-table tr[data-job="%s"]' % ids[1])
        assert c.call("SHOW", ids[1]) is None
        active = c.call("GETJOB", "FROM", "orders")[0][1].decode()
        browser.wait("return document.querySelector(arguments[0]) === null", '#job-table tr[data-job="%s"]' % active)
        c.call("ENQUEUE", active)  # back in the queue: shown again, then requeued from the page
        browser.wait("return document.querySelector(arguments[0]) !== null", '#job-table tr[data-job="%s"]' % active)
        browser.click('#job-table tr[data-job="%s"] button.requeue' % active)
        browser.wait("return !!Array.from(document.querySelectorAll('.toast')).find(t => t.textContent.startsWith('Requeued'))")

        # A phone: nothing wider than the screen but the tables, which scroll.
        phone = sessions(390, 844, mobile=2)
        phone.authorize(AUTH)
        phone.get(url)
        phone.wait("return document.querySelector(arguments[0])", row("orders"))
        assert phone.js("return document.documentElement.scrollWidth <= window.innerWidth")
        height = phone.js("return document.querySelector(arguments[0]).getBoundingClientRect().height",
                          row("orders") + ' button[data-state="out"]')
        assert height >= 34  # big enough to tap
        saved(capsys, phone, "dashboard-phone.png")
        c.close()
    finally:
        node.stop()


def three_nodes(tmp_path, http_ports):
    """Three nodes met in a full mesh, node ``i`` with an HTTP side on
    ``http_ports[i]`` if there is one; a killed node is seen failing after
    2 s.  Returns ``(nodes, their IDs)``; the caller kills the nodes."""
    timeout = ["--set", "cluster-node-timeout=2000"]
    nodes = [NodeProcess(tmp_path / ("n%d" % i),
                         args=timeout + (["--set", "http-port=%d" % http_ports[i]] if i < len(http_ports) else []))
             for i in range(3)]
    try:
        for n in nodes:
            n.start(wait=False)
        for n in nodes:
            n.wait_ready()
        for n in nodes[1:]:
            c = n.client()
            assert c.call("CLUSTER", "MEET", "127.0.0.1", str(nodes[0].port)) == b"OK"
            c.close()
        wait_full_mesh(nodes)
        ids = []
        for n in nodes:
            c = n.client()
            ids.append(c.call("HELLO")[1].decode())
            c.close()
    except BaseException:
        for n in nodes:
            n.kill()
        raise
    return nodes, ids


def test_cluster_of_three_shows_a_killed_node_down(tmp_path, sessions):
    port = free_port()
    nodes, ids = three_nodes(tmp_path, [port])
    try:
        browser = sessions(1280, 900)
        browser.get("http://127.0.0.1:%d/" % port)
        up = "return Array.from(document.querySelectorAll('#nodes tr[data-node]')).filter(tr => tr.dataset.up === '1')" \
             ".map(tr => tr.dataset.node).sort()"
        browser.wait(up + ".length === 3", what="3 nodes up")
        assert sorted(browser.js(up)) == sorted(ids)
        assert browser.text("#cluster-summary") == "3 nodes · 3 up"

        c = nodes[1].client()
        assert c.call("CLUSTER", "LEAVING", "yes") == b"OK"
        c.close()
        leaving = '#nodes tr[data-node="%s"]' % ids[1]
        browser.wait("return document.querySelector(arguments[0]).className === 'leaving'", leaving, timeout=10,
                     what="node 1 shown leaving")
        assert browser.text(leaving + " td:nth-child(5)") == "leaving"

        nodes[2].kill()
        started = time.time()
        killed = '#nodes tr[data-node="%s"]' % ids[2]
        browser.wait("return document.querySelector(arguments[0]).dataset.up === '0'", killed, timeout=20,
                     what="the killed node shown down")
        assert browser.text(killed + " td:nth-child(3)") == "down"
        assert "1 down" in browser.text("#cluster-summary")
        assert time.time() - started < 20
    finally:
        for n in nodes:
            n.kill()


def cell(selector, node_id):
    return '%s td[data-node="%s"]' % (selector, node_id)


def test_cluster_view_sums_the_nodes_shows_moves_one_rate_window_and_a_killed_node(tmp_path, sessions, capsys):
    """Three nodes, two with an HTTP side; the page of node 0: the queues
    summed over the cluster with each node's jobs, a link to node 1's
    dashboard, jobs moved by federation adding up, the rates legend and
    table over the same window, dashes for latencies never measured, and
    node 2 killed: unreachable, its jobs out of the sums, said so."""
    ports = [free_port(), free_port()]
    nodes, ids = three_nodes(tmp_path, ports)
    try:
        clients = [n.client() for n in nodes]
        for i, n in enumerate((3, 2, 4)):
            for k in range(n):
                clients[i].call("ADDJOB", "orders", "o%d" % k, "0", "REPLICATE", "1")

        browser = sessions(1400, 1000)
        browser.get("http://127.0.0.1:%d/" % ports[0])
        orders = 'tr[data-cq="orders"]'
        browser.wait("return document.querySelector(arguments[0]) && "
                     "document.querySelector(arguments[0] + ' td.total').textContent === '9'", orders,
                     what="orders summed over the three nodes")
        assert [browser.text(cell(orders, i)) for i in ids] == ["3", "2", "4"]
        assert browser.js("return document.getElementById('cq-partial').hidden") is True
        assert browser.text("#cq-summary").startswith("3 of 3 nodes counted")
        # The cluster table: each node's jobs, and where its dashboard is.
        jobs = "return Array.from(document.querySelectorAll('#nodes tr[data-node]'))" \
               ".map(tr => [tr.dataset.node, tr.children[5].textContent, tr.dataset.answer])"
        assert sorted(browser.js(jobs)) == sorted([[ids[0], "3", "ok"], [ids[1], "2", "ok"], [ids[2], "4", "ok"]])
        link = '#nodes tr[data-node="%s"] td:nth-child(9) a' % ids[1]
        assert browser.attribute(link, "href") == "http://127.0.0.1:%d/" % ports[1]
        assert browser.attribute('#cq-table th[data-node="%s"] a' % ids[1], "href") == "http://127.0.0.1:%d/" % ports[1]
        assert browser.text('#nodes tr[data-node="%s"] td:nth-child(9)' % ids[2]) == "–"  # no HTTP side

        # Latencies never measured show a dash, not 0.
        for name in ("getjob_wait", "addjob_replication", "add_to_ack"):
            lat = '#c-latency tr[data-latency="%s"]' % name
            assert [browser.text(lat + " td:nth-child(%d)" % k) for k in (2, 3, 4)] == ["–", "–", "0"], name

        # Federation: node 1's consumer takes jobs queued on node 0.
        for k in range(40):
            clients[0].call("ADDJOB", "work", "w%d" % k, "0", "REPLICATE", "1")
        got = []
        deadline = time.time() + 20
        while len(got) < 5 and time.time() < deadline:
            got += clients[1].call("GETJOB", "TIMEOUT", "1000", "COUNT", "5", "FROM", "work") or []
        assert len(got) >= 5
        for job in got:
            clients[1].call("ACKJOB", job[1])
        # Node 0 delivers nothing itself: every job out of its queue (QSTAT's
        # jobs-out) was moved to node 1.
        moved = wait_for(lambda: qstat(clients[0], "work")["jobs-out"], timeout=10, what="jobs moved out")
        work = row("work")
        cells = """
            const heads = Array.from(document.querySelectorAll('#queue-table thead th')).map(th => th.textContent);
            const tr = document.querySelector(arguments[0]);
            return tr && Object.fromEntries(Array.from(tr.children).map((td, i) => [heads[i], td.textContent]));"""
        browser.wait("const cells = (function () {%s}).apply(null, arguments); "
                     "return cells && cells['Moved out'] === arguments[1]" % cells, work, str(moved),
                     what="node 0's moves out")
        cells = browser.js(cells, work)
        assert cells["Removed"] == cells["Moved out"] == str(moved)  # nothing delivered here: all moved
        assert cells["Moved in"] == "0"
        assert qstat(clients[0], "work")["jobs-out"] == moved
        cq = 'tr[data-cq="work"]'
        browser.wait("return document.querySelector(arguments[0] + ' td[data-key=moved_in]').textContent === "
                     "arguments[1]", cq, str(moved), what="the moves in, summed")
        sums = browser.js("return Object.fromEntries(Array.from(document.querySelectorAll(arguments[0] + "
                          "' td[data-key]')).map(td => [td.dataset.key, td.textContent]))", cq)
        assert sums["moved_out"] == sums["moved_in"] == str(moved)
        assert sums["acked"] == str(len(got))

        # One window: the legend and the table give the same rates (fresh
        # traffic, within the window).
        for k in range(5):
            clients[0].call("ADDJOB", "fresh", "f%d" % k, "0", "REPLICATE", "1")
        clients[0].call("GETJOB", "FROM", "fresh")
        agree = """
            const legend = Array.from(document.querySelectorAll('#legend-rates b')).map(b => Number(b.dataset.value));
            const heads = Array.from(document.querySelectorAll('#queue-table thead th'));
            const col = key => {
              const i = heads.findIndex(th => th.dataset.key === key);
              return Array.from(document.querySelectorAll('#queue-table tbody tr[data-queue]'))
                .reduce((sum, tr) => sum + Number(tr.children[i].dataset.value), 0);
            };
            const table = [col('rate_in'), col('rate_out'), col('rate_ack'), col('rate_nack')];
            return legend[0] > 0 && legend[1] > 0 && legend.every((v, i) => Math.abs(v - table[i]) < 1e-9)
              ? [legend, table] : null;"""
        legend, table = browser.wait(agree, timeout=10, what="the legend and the table on one window")
        assert "10 s" in browser.text("#rates-window")
        saved(capsys, browser, "dashboard-cluster.png", full_page=True)

        # A node killed: unreachable, out of the sums, and the page says so.
        nodes[2].kill()
        browser.wait("return document.querySelector(arguments[0]).dataset.answer === 'unreachable'",
                     '#nodes tr[data-node="%s"]' % ids[2], timeout=15, what="node 2 unreachable")
        browser.wait("return document.querySelector(arguments[0] + ' td.total').textContent === '5'", orders,
                     what="orders without node 2")
        assert browser.text(cell(orders, ids[2])) == "?"
        assert browser.js("return document.getElementById('cq-partial').hidden") is False
        partial = browser.text("#cq-partial")
        assert ids[2][:8] in partial and "unreachable" in partial and "not in these sums" in partial
        assert browser.text("#cq-summary").startswith("2 of 3 nodes counted")
        assert browser.text('#nodes tr[data-node="%s"] td:nth-child(6)' % ids[2]) == "?"
        saved(capsys, browser, "dashboard-cluster-partial.png", full_page=True)

        # A latency measured shows a time.
        clients[0].call("GETJOB", "FROM", "orders")
        browser.wait("return document.querySelector('#c-latency tr[data-latency=getjob_wait] td:nth-child(2)')"
                     ".textContent !== '–'", what="the GETJOB wait measured")
        for c in clients[:2]:
            c.close()
    finally:
        for n in nodes:
            n.kill()


def test_live_updates_without_reload(tmp_path, sessions):
    port = free_port()
    # The default user (no password) may not act: the page is read-only.
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port,
                                             "--set", "user=default on nopass ~* +@all -@manage"]).start()
    try:
        browser = sessions(1280, 900)
        browser.get("http://127.0.0.1:%d/" % port)
        browser.wait("return document.querySelector('#queue-table td.empty')", what="the empty queues table")
        browser.js("window.sameDocument = true")
        # A user without @manage: the actions are off, and the page says why.
        assert "@manage" in browser.text("#actions-notice")

        c = node.client()
        c.call("ADDJOB", "live", "one", "0")
        browser.wait("return document.querySelector(arguments[0])", row("live"), what="the new queue")
        assert not browser.enabled(row("live") + ' button[data-state="out"]')
        c.call("ADDJOB", "live", "two", "0")
        c.call("ADDJOB", "other", "x", "0")
        browser.wait("return document.querySelector(arguments[0]).children[1].textContent === '2'", row("live"))
        browser.wait("return Number(document.querySelector(arguments[0]).children[3].textContent) > 0", row("live"),
                     what="the queue's rate in")
        c.call("GETJOB", "FROM", "live")
        browser.wait("return document.querySelector(arguments[0]).children[1].textContent === '1'", row("live"))
        browser.wait("return Number(document.getElementById('chart-rates').dataset.max) > 0",
                     what="the adds in the rates chart")
        assert browser.js("return window.sameDocument === true")  # never reloaded

        # Sort by name, then filter.
        names = "return Array.from(document.querySelectorAll('#queue-table tr[data-queue]')).map(tr => tr.dataset.queue)"
        browser.click('#queue-table th[data-key="name"]')
        assert browser.js(names) == ["live", "other"]
        browser.click('#queue-table th[data-key="name"]')
        assert browser.js(names) == ["other", "live"]
        browser.type("#queue-filter", "oth")
        browser.wait(names + ".join() === 'other'", what="the filter")

        # Loading and AOF-rewrite progress, as /api/node gives them while they
        # last (added here to the node's real answers: a load is over too
        # soon to be caught).
        browser.js("""
            const real = window.fetch;
            window.fetch = (url, opts) => real(url, opts).then(r => {
              if (!String(url).endsWith('/api/node')) return r;
              return r.json().then(j => {
                Object.assign(j.persistence, {loading: 1, loading_loaded_perc: 42.5, loading_eta_seconds: 7,
                  aof_rewrite_in_progress: 1, aof_rewrite_progress_perc: 80, aof_rewrite_eta_seconds: 2});
                return new Response(JSON.stringify(j), {status: 200, headers: {'Content-Type': 'application/json'}});
              });
            });""")
        bars = "return Array.from(document.querySelectorAll('#c-progress .progress')).map(p => p.textContent)"
        browser.wait(bars + ".length === 2", what="two progress bars")
        assert browser.js(bars) == ["Loading the AOF42.5% · 7s left", "Rewriting the AOF80.0% · 2s left"]
        assert browser.js("return document.querySelector('#c-progress [role=progressbar]')"
                          ".getAttribute('aria-valuenow')") == "43"
        assert browser.text("#c-aof") == "Loading"

        # The AOF in error (a full disk), as INFO and /api/node give it then.
        browser.js("""
            const real = window.fetch;
            window.fetch = (url, opts) => real(url, opts).then(r => {
              if (!String(url).endsWith('/api/node')) return r;
              return r.json().then(j => {
                Object.assign(j.persistence, {loading: 0, aof_rewrite_in_progress: 0, aof_last_write_status: 'err',
                  aof_last_write_error: 'No space left on device'});
                return new Response(JSON.stringify(j), {status: 200, headers: {'Content-Type': 'application/json'}});
              });
            });""")
        browser.wait("return document.getElementById('c-aof').textContent === 'AOF error'", what="the AOF error")
        assert "writes refused\nNo space left on device" in browser.text("#c-aof-pairs")
        c.close()
    finally:
        node.stop()


def test_schedules_and_queue_limits_appear_once_there_is_one(tmp_path, sessions):
    port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port]).start()
    try:
        browser = sessions(1280, 900)
        browser.get("http://127.0.0.1:%d/" % port)
        browser.wait("return document.querySelector('#queue-table td.empty')", what="the page drawn")
        assert browser.js("return document.getElementById('schedules').hidden") is True  # none: no panel
        c = node.client()
        assert c.call("SCHEDULE", "ADD", "tick", "sched-q", "x", "EVERY", "1000", "REPLICATE", "1") == b"OK"
        cells = "return Array.from(document.querySelectorAll('#schedule-table tr[data-schedule=\"tick\"] td'))" \
                ".map(td => td.textContent)"
        browser.wait("return Number((function () {" + cells + "})()[4]) >= 2", what="the schedule's runs")
        shown = browser.js(cells)
        assert shown[:4] == ["tick", "sched-q", "every 1000 ms", "active"] and shown[9] == ""
        assert browser.js("return document.getElementById('schedules').hidden") is False
        assert c.call("SCHEDULE", "PAUSE", "tick") == b"OK"
        browser.wait(cells + "[3] === 'paused'", what="the schedule paused")
        assert browser.text("#schedules-summary") == "1 schedule · 1 paused"
        assert c.call("SCHEDULE", "DEL", "tick") == 1
        browser.wait("return document.getElementById('schedules').hidden", what="the panel gone with the schedule")
        # A queue limit: beside the queue's name, gone with it.
        pill = 'tr[data-queue="sched-q"] .pill.limit'
        assert browser.js("return document.querySelector(arguments[0]).hidden", pill) is True
        assert c.call("QLIMIT", "sched-q", "RATE", "2.5", "BURST", "3", "CONCURRENCY", "4") == b"OK"
        browser.wait("return document.querySelector(arguments[0]).textContent === '2.5/s · 0 of 4 in flight'", pill,
                     what="the limit's pill")
        assert "burst 3" in browser.attribute(pill, "title")
        assert c.call("QLIMIT", "sched-q", "NONE") == b"OK"
        browser.wait("return document.querySelector(arguments[0]).hidden", pill, what="the pill gone with the limit")
    finally:
        node.kill()
