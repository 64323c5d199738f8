"""Who may do what on the HTTP side, in memory (disque/http/access.py,
api.py, dispatch.py): requests through the node's real site on a
MemoryReactorClock, from the peer address a test picks.

Two tenants (alice ``~a:*``, bob ``~b:*``) see, read and act on their own
queues and jobs only; a user without the category cannot act or read;
actions are their RESP commands (MONITOR, the slow log and the command
stats see them); the Host check; the security headers on every answer;
Bearer and Basic as the default user; wrong passwords counted, slowed and
refused per source; protected mode; the access log."""

import base64
import json

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.logger import formatEvent

from disque.http.access import CSP, host_allowed, host_name
from disque.access.protection import DENIED
from tests.support.memory import captured_log

LOCAL = "127.0.0.1"
STRANGER = "10.9.8.7"
ACTION = b"X-Disque-Action: 1\r\n"
HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer",
           "content-security-policy": CSP.decode()}
USERS = (("alice", "a-pw", "~a:* +@all"), ("bob", "b-pw", "~b:* +@all"),
         ("viewer", "v-pw", "~* +@inspect"), ("feeder", "f-pw", "~* +@produce"))


class Answer:
    def __init__(self, raw: bytes):
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.raw = raw
        self.status = int(lines[0].split(" ")[1]) if lines[0] else None
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()

    @property
    def json(self):
        return json.loads(self.body)


def send(node, method, path, headers=b"", body=b"", peer=LOCAL, host=b"localhost:8080"):
    """The transport of one request to the node's HTTP side, in memory."""
    [site] = [f for port, f, *_ in node.reactor.tcpServers if port == node.config["http-port"]]
    addr = IPv4Address("TCP", peer, 40000)
    proto = site.buildProtocol(addr)
    tr = StringTransport(peerAddress=addr, hostAddress=IPv4Address("TCP", "127.0.0.1", 8080))
    proto.makeConnection(tr)
    host_line = b"Host: " + host + b"\r\n" if host is not None else b""
    proto.dataReceived(b"%s %s HTTP/1.1\r\n%sConnection: close\r\nContent-Length: %d\r\n%s\r\n%s"
                       % (method, path, host_line, len(body), headers, body))
    return tr


def http(node, method, path, headers=b"", body=b"", **kw) -> Answer:
    return Answer(send(node, method, path, headers, body, **kw).value())


def basic(name, password) -> bytes:
    return b"Authorization: Basic " + base64.b64encode(("%s:%s" % (name, password)).encode()) + b"\r\n"


def get(node, path, auth=b"", **kw) -> Answer:
    return http(node, b"GET", path, auth, **kw)


def act(node, path, auth, payload=None) -> Answer:
    return http(node, b"POST", path, auth + ACTION, json.dumps(payload or {}).encode())


@pytest.fixture
def tenants(make):
    """A node with the users of USERS, a job in a:orders and one in
    b:orders: (node, admin connection, alice's job ID, bob's job ID)."""
    node = make(**{"http-port": "8080", "requirepass": "root-pw"})
    admin = node.connect()
    assert admin.call("AUTH", "root-pw") == b"+OK\r\n"
    for name, password, rules in USERS:
        assert admin.call("ACL", "SETUSER", name, "on", ">" + password, *rules.split()) == b"+OK\r\n"
    alice_job = admin.call("ADDJOB", "a:orders", "alice-secret", "0")[1:-2]
    bob_job = admin.call("ADDJOB", "b:orders", "bob-secret", "0")[1:-2]
    return node, admin, alice_job, bob_job


ALICE, BOB, VIEWER, FEEDER = (basic(n, p) for n, p, _ in USERS)
ROOT = b"Authorization: Bearer root-pw\r\n"


# -- tenants ---------------------------------------------------------------------

def test_a_tenant_sees_only_its_queues_and_jobs(tenants):
    node, admin, alice_job, bob_job = tenants
    queues = get(node, b"/api/queues", ALICE).json
    assert [q["name"] for q in queues["queues"]] == ["a:orders"] and queues["total"] == 1
    assert [q["name"] for q in get(node, b"/api/queues", ROOT).json["queues"]] == ["a:orders", "b:orders"]
    [job] = get(node, b"/api/queues/a:orders", ALICE).json["jobs"]
    assert job["body"] == "alice-secret"
    assert get(node, b"/api/jobs/" + alice_job, ALICE).json["body"] == "alice-secret"
    theirs = get(node, b"/api/queues/b:orders", ALICE)
    assert (theirs.status, theirs.json) == (403, {"error": "-NOPERM No permissions to access a queue"})
    for answer in (get(node, b"/api/jobs/" + bob_job, ALICE), get(node, b"/api/queues/b:orders", ALICE)):
        assert answer.status == 403 and b"bob-secret" not in answer.raw
    # a job this node does not know: a tenant cannot tell whose it is (403, as SHOW); the root user 404
    unknown = bob_job[:-4] + (b"0000" if not bob_job.endswith(b"0000") else b"1111")
    assert get(node, b"/api/jobs/" + unknown, ALICE).status == 403
    assert get(node, b"/api/jobs/" + unknown, ROOT).status == 404
    # /metrics: alice's queue has series, bob's none (not even in _other); node-wide figures stay
    metrics = get(node, b"/metrics", ALICE).body
    assert b'disque_queue_jobs{queue="a:orders"} 1' in metrics and b"b:orders" not in metrics
    assert b"_other" not in metrics and b"disque_jobs 2\n" in metrics
    root_metrics = get(node, b"/metrics", ROOT).body
    assert b'disque_queue_jobs{queue="b:orders"} 1' in root_metrics
    # the refusals are in ACL LOG, as the HTTP client they came from
    log = admin.call("ACL", "LOG")
    assert b"alice" in log and b"name=http" in log and b"addr=127.0.0.1:40000" in log


def test_a_dead_letter_from_another_tenants_queue_is_not_shown(tenants):
    node, admin, _, _ = tenants
    job_id = admin.call("ADDJOB", "b:work", "bob-dead", "0", "MAXDELIVERIES", "1", "DEADLETTER", "a:dead")[1:-2]
    admin.call("GETJOB", "FROM", "b:work")
    assert admin.call("NACK", job_id) == b":1\r\n"
    peek = admin.call("QPEEK", "a:dead", "1")
    assert b"bob-dead" in peek
    [dead_id] = [w for w in peek.split(b"\r\n") if w.startswith(b"D-")]
    view = get(node, b"/api/queues/a:dead", ALICE)
    assert view.status == 200 and view.json["jobs"] == [] and b"bob-dead" not in view.raw
    assert get(node, b"/api/jobs/" + dead_id, ALICE).status == 403
    assert get(node, b"/api/jobs/" + dead_id, ROOT).json["body"] == "bob-dead"


def test_a_tenant_cannot_act_on_another_tenants_queue_or_job(tenants):
    node, admin, alice_job, bob_job = tenants
    for path in (b"/api/jobs/%s/requeue" % bob_job, b"/api/jobs/%s/delete" % bob_job):
        answer = act(node, path, ALICE)
        assert (answer.status, answer.json) == (403, {"error": "-NOPERM No permissions to access a job"}), path
    answer = act(node, b"/api/queues/b:orders/pause", ALICE, {"state": "all"})
    assert (answer.status, answer.json) == (403, {"error": "-NOPERM No permissions to access a queue"})
    assert b"bob-secret" in admin.call("SHOW", bob_job)  # still there, still queued, not paused
    assert admin.call("QLEN", "b:orders") == b":1\r\n" and admin.call("PAUSE", "b:orders", "state") == b"+none\r\n"
    # her own: done
    assert act(node, b"/api/queues/a:orders/pause", ALICE, {"state": "out"}).json["paused"] == "out"
    assert admin.call("PAUSE", "a:orders", "state") == b"+out\r\n"
    assert act(node, b"/api/jobs/%s/delete" % alice_job, ALICE).json == {"deleted": 1}
    assert admin.call("SHOW", alice_job) == b"$-1\r\n"


def test_a_user_without_the_category_cannot_act_or_read(tenants):
    node, admin, alice_job, _ = tenants
    assert get(node, b"/api/node", VIEWER).json["actions"] is False
    assert get(node, b"/api/node", ALICE).json["actions"] is True
    assert get(node, b"/api/jobs/" + alice_job, VIEWER).json["body"] == "alice-secret"  # @inspect, ~*
    answer = act(node, b"/api/queues/a:orders/pause", VIEWER, {"state": "all"})
    assert (answer.status, answer.json) == (
        403, {"error": "-NOPERM User viewer has no permissions to run the 'pause' command"})
    assert act(node, b"/api/jobs/%s/requeue" % alice_job, VIEWER).status == 403
    assert admin.call("PAUSE", "a:orders", "state") == b"+none\r\n"
    # without @inspect: no reads at all, the metrics included
    for path in (b"/api/node", b"/api/queues", b"/api/jobs/" + alice_job, b"/api/rates"):
        answer = get(node, path, FEEDER)
        assert answer.status == 403 and b"alice-secret" not in answer.raw, path
        assert answer.json["error"].startswith("-NOPERM User feeder has no permissions"), path
    answer = get(node, b"/metrics", FEEDER)
    assert answer.status == 403 and b"disque_jobs" not in answer.body


def enqueue_calls(conn) -> int:
    stats = conn.call("INFO", "commandstats")
    return int(stats.partition(b"cmdstat_enqueue:calls=")[2].partition(b",")[0] or 0)


def test_an_action_is_seen_by_monitor_the_slow_log_and_the_stats(tenants):
    node, admin, alice_job, _ = tenants
    monitor = node.connect()
    monitor.call("AUTH", "root-pw")
    assert monitor.call("MONITOR") == b"+OK\r\n"
    admin.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
    admin.call("SLOWLOG", "RESET")
    admin.call("GETJOB", "FROM", "a:orders")
    monitor.take()
    before = enqueue_calls(admin)
    assert act(node, b"/api/jobs/%s/requeue" % alice_job, ALICE).json == {"requeued": 1}
    assert monitor.take().endswith(b' [127.0.0.1:40000] "ENQUEUE" "' + alice_job + b'"\r\n')
    assert b"ENQUEUE" in admin.call("SLOWLOG", "GET") and enqueue_calls(admin) == before + 1
    assert admin.call("QLEN", "a:orders") == b":1\r\n"
    assert len(node.runtime.ctx.clients) == 2  # admin and monitor: the request's client is gone with it


def test_the_request_client_holds_nothing_for_maxmemory_clients(make):
    """The request's client is in the node's table of clients while its
    command runs: an eviction pass then (maxmemory-clients) counts it as
    holding nothing and passes it by."""
    from twisted.web.test.requesthelper import DummyRequest

    from disque.http.dispatch import request_client

    node = make(**{"http-port": "8080"})
    holder = node.connect()
    holder.proto.dataReceived(b"*2\r\n$4\r\nPING\r\n$400000\r\n" + b"x" * 300000)  # held, not yet run
    memory = node.runtime.client_memory
    with request_client(node.runtime, DummyRequest([b""]), node.runtime.ctx.acl.default) as client:
        memory.set_limit(128 * 1024)  # counts every client at once, this one too
        assert client.conn.counted == 0 and memory.check() == 1  # the holder goes, not this one
    assert holder.closed and client.id not in node.runtime.ctx.clients


# -- who -------------------------------------------------------------------------

def test_bearer_and_basic_are_the_default_user_and_names_are_users(tenants):
    node, _, _, _ = tenants
    for auth in (ROOT, basic("", "root-pw"), basic("default", "root-pw"), basic("prometheus", "root-pw")):
        answer = get(node, b"/api/queues", auth)
        assert answer.status == 200 and answer.json["total"] == 2, auth
    assert get(node, b"/api/queues", basic("alice", "root-pw")).status == 401  # alice is a user: her password
    answer = get(node, b"/api/queues")
    assert (answer.status, answer.json) == (401, {"error": "-NOAUTH Authentication required."})
    assert answer.headers["www-authenticate"] == 'Basic realm="disque"'
    wrong = get(node, b"/metrics", basic("alice", "guess"))
    assert wrong.status == 401 and wrong.body == b"-WRONGPASS invalid username-password pair or user is disabled.\n"


def test_without_a_password_anyone_local_is_the_default_user(make):
    node = make(**{"http-port": "8080"})
    assert get(node, b"/api/node").status == 200
    assert get(node, b"/api/node", b"Authorization: Bearer anything\r\n").status == 200  # nopass: any password
    node.connect().call("ACL", "SETUSER", "alice", "on", ">a-pw", "~a:*", "+@all")
    assert get(node, b"/api/node", basic("alice", "wrong")).status == 401  # asked to be alice, and is not


def test_wrong_passwords_are_counted_slowed_then_refused_per_source(tenants):
    node, admin, _, _ = tenants
    for _ in range(3):
        assert get(node, b"/metrics", basic("alice", "guess"), peer="127.0.0.2").status == 401
    late = send(node, b"GET", b"/metrics", basic("alice", "guess"), peer="127.0.0.2")
    assert late.value() == b""  # the 4th in a row is answered late
    node.reactor.advance(0.1)
    assert Answer(late.value()).status == 401
    for _ in range(6):
        send(node, b"GET", b"/metrics", basic("alice", "guess"), peer="127.0.0.2")
        node.reactor.advance(2.0)
    refused = get(node, b"/metrics", ALICE, peer="127.0.0.2")  # the right password, unchecked
    assert refused.status == 429 and 0 < int(refused.headers["retry-after"]) <= 60
    assert refused.body.startswith(b"-ERR too many failed authentication attempts from 127.0.0.2: retry in ")
    assert get(node, b"/metrics", ALICE, peer="127.0.0.3").status == 200  # another source
    stats = admin.call("INFO", "stats")
    assert b"auth_failures:10\r\n" in stats and b"auth_delayed:7\r\n" in stats and b"auth_refused:1\r\n" in stats
    assert b"AUTH" in admin.call("ACL", "LOG")
    node.reactor.advance(61)
    assert get(node, b"/metrics", ALICE, peer="127.0.0.2").status == 200


# -- the Host check ----------------------------------------------------------------

@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:8080", b"localhost.evil.example", b"n",
                                  b"[::1", b"localhost:80:80", b"localhost:x", b"\xff"])
def test_a_foreign_host_is_refused_without_a_body(tenants, host):
    node, _, alice_job, _ = tenants
    for path in (b"/api/jobs/" + alice_job, b"/api/queues/a:orders", b"/metrics", b"/"):
        answer = get(node, path, ROOT, host=host)
        assert answer.status == 421 and b"alice-secret" not in answer.raw, path
        assert b"http-allowed-hosts" in answer.body
    assert act(node, b"/api/queues/a:orders/pause", ROOT, {"state": "all"}).status == 200  # (control)


@pytest.mark.parametrize("host", [b"localhost", b"localhost:8080", b"LocalHost:8080", b"127.0.0.1:8080",
                                  b"[::1]:8080", b"[::1]", b"10.1.2.3:8080", b"192.168.7.7", None])
def test_local_names_and_addresses_pass(make, host):
    node = make(**{"http-port": "8080", "http-bind": "10.1.2.3"})
    node.connect().call("ADDJOB", "q", "body", "0")
    answer = get(node, b"/api/queues/q", host=host)
    assert answer.status == 200 and answer.json["jobs"][0]["body"] == "body"


def test_http_allowed_hosts_adds_names_and_star_allows_any(make):
    node = make(**{"http-port": "8080", "http-allowed-hosts": "dash.example.net Other.Example"})
    assert get(node, b"/api/node", host=b"dash.example.net:8080").status == 200
    assert get(node, b"/api/node", host=b"other.example").status == 200
    assert get(node, b"/api/node", host=b"evil.example").status == 421
    admin = node.connect()
    assert admin.call("CONFIG", "SET", "http-allowed-hosts", "*") == b"+OK\r\n"  # at once
    assert get(node, b"/api/node", host=b"evil.example").status == 200


def test_host_names():
    assert host_name(b"Example.COM:80") == "example.com" and host_name(b"[::1]:7790") == "::1"
    assert host_name(b"[fe80::1]") == "fe80::1" and host_name(b"10.0.0.1") == "10.0.0.1"
    for bad in (b"", b":80", b"a:b:c", b"[::1]x", b"[::1]:", b"h:", b"h:\xd9\xa1", b"\xff"):
        assert host_name(bad) is None, bad
    config = {"http-allowed-hosts": [], "http-bind": "127.0.0.1"}
    assert not host_allowed(b"0x7f.1", config) and not host_allowed(b"localhost.", config)


# -- headers ---------------------------------------------------------------------

def test_security_headers_on_every_answer(tenants):
    node, _, alice_job, _ = tenants
    answers = {
        200: [get(node, b"/", ROOT), get(node, b"/api/node", ROOT), get(node, b"/metrics", ROOT),
              get(node, b"/static/app.js", ROOT)],
        401: [get(node, b"/api/node"), get(node, b"/", basic("x", "y"))],
        403: [get(node, b"/api/jobs/" + alice_job, basic("bob", "b-pw")), get(node, b"/metrics", FEEDER)],
        404: [get(node, b"/nothing", ROOT), get(node, b"/api/nothing", ROOT)],
        421: [get(node, b"/", ROOT, host=b"evil.example")],
    }
    for status, group in answers.items():
        for answer in group:
            assert answer.status == status
            for name, value in HEADERS.items():
                assert answer.headers.get(name) == value, (status, name)
    for answer in (get(node, b"/api/node", ROOT), get(node, b"/api/node"), get(node, b"/metrics", ROOT)):
        assert answer.headers["cache-control"] == "no-store"
    assert get(node, b"/static/app.js", ROOT).headers["cache-control"] == "no-cache"  # kept, checked each time


# -- protected mode ----------------------------------------------------------------

def test_protected_mode_denies_a_stranger_every_page(make):
    node = make(**{"http-port": "8080"})
    admin = node.connect()
    job_id = admin.call("ADDJOB", "q", "the-body", "0")[1:-2]
    for path in (b"/api/jobs/" + job_id, b"/api/queues/q"):
        answer = get(node, path, peer=STRANGER, host=b"10.1.2.3:8080")
        assert answer.status == 403 and answer.json == {"error": DENIED.rstrip(b"\r\n").decode()}
        assert b"the-body" not in answer.raw
    for path in (b"/metrics", b"/"):
        answer = get(node, path, peer=STRANGER)
        assert answer.status == 403 and answer.body == DENIED.rstrip(b"\r\n") + b"\n"
    assert b"rejected_connections:4\r\n" in admin.call("INFO", "stats")
    assert get(node, b"/api/queues/q").status == 200  # from loopback
    admin.call("CONFIG", "SET", "requirepass", "pw")  # a password lifts it: the stranger must authenticate
    assert get(node, b"/api/queues/q", peer=STRANGER).status == 401
    assert b"the-body" in get(node, b"/api/queues/q", b"Authorization: Bearer pw\r\n", peer=STRANGER).raw
    admin.call("AUTH", "pw")
    admin.call("CONFIG", "SET", "requirepass", "")
    admin.call("CONFIG", "SET", "protected-mode", "no")
    assert get(node, b"/api/queues/q", peer=STRANGER).status == 200


# -- the access log ---------------------------------------------------------------------

def access_lines(events):
    return [formatEvent(e) for e in events if "GET " in formatEvent(e)]


@pytest.mark.parametrize("level, logged", [("warning", False), ("notice", False), ("verbose", True),
                                           ("debug", True)])
def test_access_lines_are_verbose_lines_of_the_node_log(make, level, logged):
    node = make(**{"http-port": "8080", "loglevel": level})
    [site] = [f for port, f, *_ in node.reactor.tcpServers if port == 8080]
    with captured_log() as events:
        site.doStart()                                        # as the listener starts it: without a line
        answer = get(node, b"/api/node")
        assert get(node, b'/nope?"\x7f', b"Referer: http://x/\r\nUser-Agent: a\\b\r\n").status == 404
        site.doStop()
    expected = ['HTTP 127.0.0.1 default "GET /api/node HTTP/1.1" 200 %d "-" "-"' % len(answer.body),
                'HTTP 127.0.0.1 default "GET /nope?\\x22\\x7f HTTP/1.1" 404 79 "http://x/" "a\\x5cb"']
    assert access_lines(events) == (expected if logged else [])
    assert [e["log_namespace"] for e in events] == (["disque.http"] * 2 if logged else [])


def test_a_refused_request_is_logged_without_a_user(make):
    node = make(**{"http-port": "8080", "loglevel": "verbose", "requirepass": "pw"})
    with captured_log() as events:
        assert get(node, b"/metrics").status == 401
        assert get(node, b"/metrics", basic("", "pw")).status == 200
    assert [t.split('"')[0] for t in access_lines(events)] == ["HTTP 127.0.0.1 - ", "HTTP 127.0.0.1 default "]


def test_a_tenant_sees_the_schedules_of_its_queues_only(tenants):
    node, admin, _, _ = tenants
    assert admin.call("SCHEDULE", "ADD", "a-tick", "a:orders", "x", "EVERY", "1000", "REPLICATE", "1") == b"+OK\r\n"
    assert admin.call("SCHEDULE", "ADD", "b-tick", "b:orders", "x", "EVERY", "1000", "REPLICATE", "1") == b"+OK\r\n"
    node.advance(1.5)
    mine = get(node, b"/api/schedules", ALICE).json["schedules"]
    assert [s["name"] for s in mine] == ["a-tick"]
    assert mine[0]["queue"] == "a:orders" and mine[0]["when"] == "every 1000 ms" and mine[0]["runs"] == 1
    assert mine[0]["fired_here"] == 1 and mine[0]["last_run"] + 1000 == mine[0]["next_run"]
    assert [s["name"] for s in get(node, b"/api/schedules", ROOT).json["schedules"]] == ["a-tick", "b-tick"]
