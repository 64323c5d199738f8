"""End-to-end tests of one real node (``twistd -n disque``) over real sockets:
the unmodified ``redis-cli``, a txredisapi producer/consumer flow, blocking
GETJOB, requeue / TTL / DELAY in real time, pipelining, config and start-up,
admin commands.

Tests that only touch their own queues share one node (``shared``); tests
that need global counts, special options or kill the node start their own.
"""

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support.resp import is_error
from tests.support.process import ROOT, Client, NodeProcess, free_port, info, parse_info, redis_cli, run_twistd, wait_for

JOB_ID = re.compile(rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")
_names = itertools.count()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("shared")).start()
    yield n
    n.stop()


@pytest.fixture
def q(request):
    """A queue name no other test uses."""
    return "%s-%d" % (re.sub(r"\W", "_", request.node.name)[:40], next(_names))


@pytest.fixture
def clients(shared):
    """clients(n): n fresh connections to the shared node, closed afterwards."""
    made = []

    def make(n=1):
        new = [shared.client() for _ in range(n)]
        made.extend(new)
        return new if n > 1 else new[0]

    yield make
    for c in made:
        c.close()


def cli(port, *args):
    rc, out = redis_cli(port, *args)
    assert rc == 0, (args, out)
    return out.decode()


def qstat(client, queue):
    reply = client.call("QSTAT", queue)
    return dict(zip(reply[::2], reply[1::2])) if reply else None


def blocked_on(client, queue):
    stat = qstat(client, queue)
    return stat[b"blocked"] if stat else 0


def show(client, job_id):
    reply = client.call("SHOW", job_id)
    return dict(zip(reply[::2], reply[1::2])) if reply else None


# ----------------------------------------------------------------------
# 1. redis-cli, unmodified
# ----------------------------------------------------------------------

def test_redis_cli_job_round_trip(node):
    p = node.port
    out = cli(p, "ADDJOB", "climq", "hello world", "0")
    assert JOB_ID.fullmatch(out.strip().encode()), out
    job_id = out.strip()
    assert cli(p, "QLEN", "climq") == "1\n"

    lines = cli(p, "SHOW", job_id).split("\n")
    fields = dict(zip(lines[0:-1:2], lines[1:-1:2]))
    assert fields["id"] == job_id and fields["queue"] == "climq"
    assert fields["state"] == "queued" and fields["body"] == "hello world"
    assert fields["repl"] == "1" and fields["additional-deliveries"] == "0"

    stat = cli(p, "QSTAT", "climq").split("\n")
    stat = dict(zip(stat[0:-1:2], stat[1:-1:2]))
    assert (stat["name"], stat["len"], stat["jobs-in"], stat["jobs-out"], stat["pause"]) == \
        ("climq", "1", "1", "0", "none")

    # Formatted output (what a terminal shows), as in the README.
    out = cli(p, "--no-raw", "GETJOB", "FROM", "climq")
    assert out == '1) 1) "climq"\n   2) "%s"\n   3) "hello world"\n' % job_id
    assert cli(p, "--no-raw", "QLEN", "climq") == "(integer) 0\n"
    lines = cli(p, "SHOW", job_id).split("\n")
    assert dict(zip(lines[0:-1:2], lines[1:-1:2]))["state"] == "active"
    stat = cli(p, "QSTAT", "climq").split("\n")
    assert dict(zip(stat[0:-1:2], stat[1:-1:2]))["jobs-out"] == "1"

    assert cli(p, "--no-raw", "ACKJOB", job_id) == "(integer) 1\n"
    assert cli(p, "--no-raw", "SHOW", job_id) == "(nil)\n"
    assert cli(p, "--no-raw", "GETJOB", "NOHANG", "FROM", "climq") == "(nil)\n"
    assert cli(p, "INFO", "jobs").split() == ["#", "Jobs", "registered_jobs:0"]
    assert cli(p, "--no-raw", "FOOBAR") == "(error) ERR unknown command 'FOOBAR'\n"


def test_redis_cli_hello_and_info(node):
    p = node.port
    lines = cli(p, "HELLO").split("\n")
    assert lines[0] == "1"                              # HELLO format version
    my_id = lines[1]
    assert re.fullmatch("[0-9a-f]{40}", my_id), lines
    assert my_id in lines[2:] and str(p) in lines[2:], lines    # myself: id, ip, port, priority

    text = cli(p, "INFO").replace("\r", "")
    sections = re.findall(r"^# (\w+)$", text, re.M)
    for wanted in ("Server", "Clients", "Memory", "Jobs", "Queues", "Persistence", "Stats", "CPU"):
        assert wanted in sections, sections
    fields = parse_info(text)
    assert fields["tcp_port"] == str(p)
    assert fields["process_id"] == str(node.proc.pid)
    assert int(fields["connected_clients"]) >= 1
    assert fields["registered_jobs"] == "0"
    assert cli(p, "INFO", "queues").split() == ["#", "Queues", "registered_queues:0"]
    # twistd's epoll reactor, made lean (disque.node.reactor), still says epoll.
    assert fields["multiplexing_api"] == "epoll"
    assert "reactor class: disque.node.reactor.LeanEPollReactor" in node.log()


def test_redis_cli_commands_from_stdin(node):
    """redis-cli with stdin not a terminal runs one command per line."""
    n = 500
    script = "".join('ADDJOB stdinq "job number %d" 0\n' % i for i in range(n))
    script += "QLEN stdinq\n" + "GETJOB COUNT 3 FROM stdinq\n" + "QLEN stdinq\nPING\n"
    rc, out = redis_cli(node.port, stdin=script.encode())
    assert rc == 0
    lines = out.decode().split("\n")
    ids = lines[:n]
    assert all(JOB_ID.fullmatch(i.encode()) for i in ids) and len(set(ids)) == n
    assert lines[n] == str(n)
    got = lines[n + 1:n + 10]
    assert got == ["stdinq", ids[0], "job number 0", "stdinq", ids[1], "job number 1",
                   "stdinq", ids[2], "job number 2"]
    assert lines[n + 10:] == [str(n - 3), "PONG", ""]


def test_redis_cli_pipe_mode(node):
    """--pipe: all replies come back and are counted.  redis-cli ends its
    pipe with ECHO <magic>, a command Disque (like the original) does not
    have, so it stops on its reply timeout: at most ~2 s with 1 s."""
    n = 2000
    data = b"".join(Client.encode("ADDJOB", "pipeq", "body-%d" % i, "0") for i in range(n))
    exe = shutil.which("redis-cli")
    p = subprocess.run([exe, "-p", str(node.port), "--pipe", "--pipe-timeout", "1"], input=data,
                       capture_output=True, timeout=30)
    summary = re.search(rb"errors: (\d+), replies: (\d+)", p.stdout)
    assert summary, p
    assert int(summary.group(2)) >= n, p
    c = node.client()
    assert c.call("QLEN", "pipeq") == n
    assert c.call("QPEEK", "pipeq", "1")[0][2] == b"body-0"
    assert c.call("QPEEK", "pipeq", "-1")[0][2] == b"body-%d" % (n - 1)
    c.close()


def test_inline_commands_like_telnet(shared, clients, q):
    c = clients()
    c.send(b"PING\r\n")
    assert c.sock.recv(100) == b"+PONG\r\n"
    c.send(('ADDJOB %s "hello world" 0\r\n' % q).encode())
    assert JOB_ID.fullmatch(c.recv_raw()[1:-2])
    c.send(b"QLEN %s\n" % q.encode())                         # a bare LF ends a line too
    assert c.recv_raw() == b":1\r\n"
    c.send(b"GETJOB FROM %s\r\n" % q.encode())
    assert c.read()[0][2] == b"hello world"
    # Typed slowly, one byte at a time.
    for b in b"PING hi\r\n":
        c.send(bytes([b]))
        time.sleep(0.001)
    assert c.recv_raw() == b"$2\r\nhi\r\n"
    # An empty line is ignored, not answered.
    c.send(b"\r\nPING\r\n")
    assert c.recv_raw() == b"+PONG\r\n"


# ----------------------------------------------------------------------
# 2. Producer / consumer flow with txredisapi
# ----------------------------------------------------------------------

def test_txredisapi_producers_consumers(node):
    producers, consumers, per = 4, 3, 150
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "txredis_flow.py"), str(node.port),
                        "txq", str(producers), str(consumers), str(per)],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    result = json.loads(p.stdout)
    added = [i for ids in result["added"] for i in ids]
    got = [pair for pairs in result["got"] for pair in pairs]
    assert len(added) == len(set(added)) == producers * per
    got_ids = [job_id for job_id, _ in got]
    assert len(got_ids) == len(set(got_ids)), "a job was delivered twice"
    assert set(got_ids) == set(added), "delivered jobs differ from added jobs"
    bodies = {body for _, body in got}
    assert bodies == {"p%d-%d" % (i, k) for i in range(producers) for k in range(per)}
    assert all(len(pairs) > 0 for pairs in result["got"]), "a consumer starved"
    assert result["acks"] == [1] * len(added)
    assert result["empty"] is None and result["qlen"] == 0
    c = node.client()
    assert c.call("QLEN", "txq") == 0
    assert info(c, "jobs")["registered_jobs"] == "0"
    stat = qstat(c, "txq")
    assert stat is None or (stat[b"jobs-in"], stat[b"jobs-out"]) == (len(added), len(added))
    c.close()


# ----------------------------------------------------------------------
# 3. Blocking GETJOB
# ----------------------------------------------------------------------

def test_getjob_blocks_until_addjob(shared, clients, q):
    consumer, producer = clients(2)
    consumer.send(Client.encode("GETJOB", "FROM", q))
    assert consumer.nothing_within(0.3), "GETJOB on an empty queue answered at once"
    wait_for(lambda: blocked_on(producer, q) == 1, what="the consumer to be blocked")
    assert int(info(producer, "clients")["blocked_clients"]) >= 1
    entry = {e["addr"]: e for e in _client_list(producer)}[_addr(consumer)]
    assert (entry["flags"], entry["cmd"]) == ("b", "getjob")
    job_id = producer.call("ADDJOB", q, "wake up", "0")
    t0 = time.time()
    assert consumer.read(timeout=5) == [[q.encode(), job_id, b"wake up"]]
    assert time.time() - t0 < 1.0
    assert producer.call("QLEN", q) == 0
    assert blocked_on(producer, q) == 0


def test_blocked_clients_served_fifo_one_job_each(shared, clients, q):
    n = 5
    waiting = clients(n)
    producer = clients()
    for i, c in enumerate(waiting):
        c.send(Client.encode("GETJOB", "TIMEOUT", "10000", "FROM", q))
        wait_for(lambda: blocked_on(producer, q) == i + 1, what="client %d to block" % i)
    ids = [producer.call("ADDJOB", q, "job-%d" % i, "0") for i in range(n + 2)]
    for i, c in enumerate(waiting):
        assert c.read(timeout=5) == [[q.encode(), ids[i], b"job-%d" % i]], "client %d" % i
        assert c.nothing_within(0.02)
    assert producer.call("QLEN", q) == 2               # one job each, the rest stays queued


def test_getjob_timeout_returns_null_array(shared, clients, q):
    c = clients()
    t0 = time.time()
    assert c.raw("GETJOB", "TIMEOUT", "400", "FROM", q) == b"*-1\r\n"
    elapsed = time.time() - t0
    assert 0.35 <= elapsed < 1.5, elapsed
    assert c.call("PING") == b"PONG"


def test_pipeline_behind_blocked_getjob_waits_in_order(shared, clients, q):
    c, producer = clients(2)
    c.send(Client.encode("GETJOB", "FROM", q) + Client.encode("PING", "after"))
    assert c.nothing_within(0.2), "a command behind a blocked GETJOB was answered early"
    c.send(Client.encode("QLEN", q))                   # arrives while the client is parked
    time.sleep(0.05)
    c.send(b"PING\r\n")
    assert c.nothing_within(0.2), "a command sent while parked was answered early"
    job_id = producer.call("ADDJOB", q, "first", "0")
    assert c.read() == [[q.encode(), job_id, b"first"]]
    assert c.read() == b"after"
    assert c.read() == 0
    assert c.read() == b"PONG"
    assert c.nothing_within(0.05)


def test_disconnected_blocked_client_does_not_steal_a_job(shared, clients, q):
    gone, producer = clients(2)
    gone.send(Client.encode("GETJOB", "FROM", q))
    wait_for(lambda: blocked_on(producer, q) == 1, what="the consumer to block")
    gone.close()
    wait_for(lambda: blocked_on(producer, q) == 0, what="the node to forget the closed client")
    job_id = producer.call("ADDJOB", q, "keep me", "0")
    assert producer.call("QLEN", q) == 1
    assert show(producer, job_id)[b"state"] == b"queued"
    assert producer.call("GETJOB", "NOHANG", "FROM", q) == [[q.encode(), job_id, b"keep me"]]


def test_pause_out_blocks_getjob_until_unpaused(shared, clients, q):
    consumer, other, admin = clients(3)
    assert admin.call("PAUSE", q, "out") == b"out"
    job_id = admin.call("ADDJOB", q, "paused", "0")
    assert admin.call("QLEN", q) == 1
    consumer.send(Client.encode("GETJOB", "FROM", q))
    assert consumer.nothing_within(0.3), "GETJOB served from a queue paused in output"
    assert other.call("GETJOB", "NOHANG", "FROM", q) is None
    assert qstat(admin, q)[b"pause"] == b"out"
    assert admin.call("PAUSE", q, "none") == b"none"
    assert consumer.read(timeout=5) == [[q.encode(), job_id, b"paused"]]
    assert admin.call("QLEN", q) == 0


def test_pause_in_refuses_addjob(shared, clients, q):
    c = clients()
    assert c.call("PAUSE", q, "in") == b"in"
    assert is_error(c.call("ADDJOB", q, "x", "0"), "PAUSED Queue paused in input, try later")
    assert c.call("PAUSE", q, "none") == b"none"
    assert JOB_ID.fullmatch(c.call("ADDJOB", q, "x", "0"))


# ----------------------------------------------------------------------
# 4. Requeue, TTL, DELAY in real time
# ----------------------------------------------------------------------

def test_retry_requeues_unacked_job(shared, clients, q):
    c = clients()
    t0 = time.time()
    job_id = c.call("ADDJOB", q, "again", "0", "RETRY", "1")
    first = c.call("GETJOB", "WITHCOUNTERS", "FROM", q)
    assert first == [[q.encode(), job_id, b"again", b"nacks", 0, b"additional-deliveries", 0]]
    assert c.call("QLEN", q) == 0
    second = c.call("GETJOB", "TIMEOUT", "4000", "WITHCOUNTERS", "FROM", q)
    elapsed = time.time() - t0
    assert second == [[q.encode(), job_id, b"again", b"nacks", 0, b"additional-deliveries", 1]], \
        "RETRY 1 job not re-queued within 4 s"
    assert 0.9 <= elapsed < 3.0, elapsed                # RETRY + up to 500 ms of jitter
    assert show(c, job_id)[b"additional-deliveries"] == 1
    assert c.call("ACKJOB", job_id) == 1
    assert c.call("GETJOB", "TIMEOUT", "1600", "FROM", q) is None, "acked job came back"


def test_ttl_expires_job(shared, clients, q):
    c = clients()
    t0 = time.time()
    job_id = c.call("ADDJOB", q, "short lived", "0", "TTL", "1")
    assert show(c, job_id)[b"ttl"] == 1
    assert c.call("QLEN", q) == 1
    wait_for(lambda: show(c, job_id) is None, timeout=4, what="the job to expire")
    elapsed = time.time() - t0
    assert 0.9 <= elapsed < 2.5, elapsed
    assert c.call("QLEN", q) == 0
    assert c.call("GETJOB", "NOHANG", "FROM", q) is None


def test_delay_makes_job_appear_later(shared, clients, q):
    c, consumer = clients(2)
    t0 = time.time()
    job_id = c.call("ADDJOB", q, "later", "0", "DELAY", "1")
    assert c.call("QLEN", q) == 0
    assert show(c, job_id)[b"state"] == b"active"
    assert c.call("GETJOB", "NOHANG", "FROM", q) is None
    got = consumer.call("GETJOB", "TIMEOUT", "4000", "FROM", q)
    elapsed = time.time() - t0
    assert got == [[q.encode(), job_id, b"later"]], "DELAY 1 job not queued within 4 s"
    assert 0.95 <= elapsed < 2.0, elapsed


# ----------------------------------------------------------------------
# 5. Pipelining
# ----------------------------------------------------------------------

def _read_n(c, n, timeout=30):
    out = []
    deadline = time.time() + timeout
    while len(out) < n:
        reply = c.reader.gets()
        if reply is not False:
            out.append(reply)
            continue
        assert time.time() < deadline, "only %d of %d replies" % (len(out), n)
        chunk = c.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed after %d replies" % len(out))
        c.reader.feed(chunk)
    return out


def test_ten_thousand_pipelined_addjobs(shared, clients, q):
    n = 10_000
    c, check = clients(2)
    payload = b"".join(Client.encode("ADDJOB", q, "body-%05d" % i, "0") for i in range(n))
    sender = threading.Thread(target=c.send, args=(payload,))
    sender.start()                                     # read while writing: no deadlock
    c.sock.settimeout(30)
    replies = _read_n(c, n)
    sender.join()
    assert all(JOB_ID.fullmatch(r) for r in replies), [r for r in replies if not JOB_ID.fullmatch(r)][:3]
    assert len(set(replies)) == n
    assert c.nothing_within(0.05)
    assert check.call("QLEN", q) == n
    peeked = check.call("QPEEK", q, str(n))
    assert [job[1] for job in peeked] == replies, "replies not in request order"
    assert [job[2] for job in peeked] == [b"body-%05d" % i for i in range(n)]


MIXED = [
    (("ADDJOB", "{q}", "a", "0"), JOB_ID),
    (("ADDJOB", "{q}", "b", "0", "RETRY", "5"), JOB_ID),
    (("QLEN", "{q}"), 2),
    (("NOSUCHCOMMAND", "x"), "ERR unknown command 'NOSUCHCOMMAND'"),
    (("GETJOB", "COUNT", "1", "FROM", "{q}"), "job a"),
    (("PING",), b"PONG"),
    (("QLEN", "{q}"), 1),
    (("ADDJOB", "{q}", "c"), "ERR wrong number of arguments for 'addjob' command"),
    (("GETJOB", "NOHANG", "COUNT", "5", "FROM", "{q}"), "job b"),
    (("GETJOB", "NOHANG", "FROM", "{q}"), None),
    (("QLEN", "{q}"), 0),
    (("PING", "last"), b"last"),
]


def _check_mixed(replies, q):
    assert len(replies) == len(MIXED)
    for (args, want), got in zip(MIXED, replies):
        if want is JOB_ID:
            assert JOB_ID.fullmatch(got), (args, got)
        elif isinstance(want, str) and want.startswith("job "):
            assert [j[2] for j in got] == [want[4:].encode()], (args, got)
        elif isinstance(want, str):
            assert is_error(got) and str(got) == want, (args, got)
        else:
            assert got == want, (args, got)


@pytest.mark.parametrize("how", ["one write", "byte by byte", "inline"])
def test_mixed_pipeline(shared, clients, q, how):
    c = clients()
    if how == "inline":
        payload = b"".join(" ".join(a.format(q=q) for a in args).encode() + b"\r\n" for args, _ in MIXED)
    else:
        payload = b"".join(Client.encode(*(a.format(q=q) for a in args)) for args, _ in MIXED)
    if how == "byte by byte":
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(payload)):
            c.send(payload[i:i + 1])
    else:
        c.send(payload)
    _check_mixed(_read_n(c, len(MIXED)), q)
    assert c.nothing_within(0.05)


# ----------------------------------------------------------------------
# 6. Config and start-up
# ----------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("port 7711\nfooo bar\n", "bad.conf:2: unknown directive 'fooo'"),
    ("maxmemory lots\n", "bad.conf:1: invalid value 'lots' for 'maxmemory'"),
    ("hz\n", "bad.conf:1: wrong number of arguments for 'hz'"),
    ('bind "127.0.0.1\n', "bad.conf:1: unbalanced quotes"),
])
def test_bad_config_file_stops_startup_with_one_line(tmp_path, text, expected):
    (tmp_path / "bad.conf").write_text(text)
    rc, out = run_twistd(["--config", "bad.conf", "--port", str(free_port())], tmp_path)
    assert rc != 0, out
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, "expected a one-line message, got:\n" + out
    assert expected in lines[0], out


def test_bad_command_line_value_stops_startup(tmp_path):
    rc, out = run_twistd(["--port", str(free_port()), "--set", "maxclients=zero"], tmp_path)
    assert rc != 0 and "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and "maxclients" in lines[0] and "'zero'" in lines[0], out


def test_missing_config_file_stops_startup(tmp_path):
    rc, out = run_twistd(["--config", "nope.conf", "--port", str(free_port())], tmp_path)
    assert rc != 0 and "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope.conf" in lines[0] and "No such file" in lines[0], out


def test_command_line_overrides_config_file(tmp_path):
    file_port = free_port()
    conf = tmp_path / "disque.conf"
    conf.write_text("port %d\nmaxclients 7\nhz 10\nmaxmemory 100mb\n" % file_port)
    n = NodeProcess(tmp_path / "node", config=str(conf),
                    args=["--set", "maxclients=9", "--maxmemory", "50mb"]).start()
    try:
        assert n.port != file_port
        c = n.client()
        assert c.call("CONFIG", "GET", "port") == [b"port", str(n.port).encode()]
        assert c.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"9"]
        assert c.call("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"52428800"]
        assert c.call("CONFIG", "GET", "hz") == [b"hz", b"10"]          # from the file
        assert info(c, "server")["config_file"] == str(conf)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", file_port), timeout=1).close()
        c.close()
    finally:
        n.stop()


def test_config_set_rewrite_and_reload(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("# my node\nmaxmemory 100mb\n\n# keep this comment\ntimeout 0\nloglevel notice\n")
    n = NodeProcess(tmp_path / "node", config=str(conf)).start()
    try:
        c = n.client()
        assert c.call("CONFIG", "SET", "maxmemory", "200mb") == b"OK"
        assert c.call("CONFIG", "SET", "timeout", "30") == b"OK"
        assert c.call("CONFIG", "SET", "maxclients", "77") == b"OK"
        assert c.call("CONFIG", "SET", "loglevel", "warning") == b"OK"
        assert is_error(c.call("CONFIG", "SET", "port", "1"), "ERR Unsupported CONFIG parameter: port")
        assert c.call("CONFIG", "REWRITE") == b"OK"
        text = conf.read_text()
        lines = text.splitlines()
        assert "# my node" in lines and "# keep this comment" in lines, text
        assert "maxmemory 200mb" in lines and "timeout 30" in lines, text
        assert "maxclients 77" in lines and "loglevel warning" in lines, text
        assert "maxmemory 100mb" not in lines and "timeout 0" not in lines, text
        c.close()
    finally:
        n.stop()
    again = NodeProcess(tmp_path / "node2", config=str(conf)).start()
    try:
        c = again.client()
        assert c.call("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"209715200"]
        assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"30"]
        assert c.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"77"]
        assert c.call("CONFIG", "GET", "loglevel") == [b"loglevel", b"warning"]
        c.close()
    finally:
        again.stop()


def test_config_rewrite_without_file_fails(node, client):
    assert is_error(client.call("CONFIG", "REWRITE"), "ERR The server is running without a config file")


def test_requirepass_in_config_file(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text('requirepass "s3cret pass"\n')
    n = NodeProcess(tmp_path / "node", config=str(conf)).start()
    try:
        c = n.client()
        for args in (("PING",), ("ADDJOB", "authq", "x", "0"), ("INFO",), ("GETJOB", "FROM", "authq"),
                     ("CONFIG", "GET", "requirepass")):
            assert c.raw(*args) == b"-NOAUTH Authentication required.\r\n", args
        c.send(b"QLEN authq\r\n")
        assert c.recv_raw() == b"-NOAUTH Authentication required.\r\n"
        assert c.raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert c.raw("PING") == b"-NOAUTH Authentication required.\r\n"
        assert c.raw("AUTH", "s3cret pass") == b"+OK\r\n"
        assert c.call("PING") == b"PONG"
        assert JOB_ID.fullmatch(c.call("ADDJOB", "authq", "x", "0"))
        other = n.client()                               # authentication is per connection
        assert other.raw("QLEN", "authq") == b"-NOAUTH Authentication required.\r\n"
        rc, out = redis_cli(n.port, "-a", "s3cret pass", "--no-auth-warning", "QLEN", "authq")
        assert (rc, out) == (0, b"1\n")
        rc, out = redis_cli(n.port, "QLEN", "authq")
        assert b"NOAUTH Authentication required." in out
        c.close()
        other.close()
    finally:
        n.stop()


def test_requirepass_changed_at_run_time(tmp_path):
    n = NodeProcess(tmp_path / "node", args=["--requirepass", "first"]).start()
    try:
        admin, waiting = n.client(), n.client()
        assert admin.call("AUTH", "first") == b"OK"
        assert waiting.raw("PING") == b"-NOAUTH Authentication required.\r\n"
        assert admin.call("CONFIG", "SET", "requirepass", "second") == b"OK"
        fresh = n.client()
        assert fresh.raw("AUTH", "first") == b"-ERR invalid password\r\n"
        assert fresh.raw("AUTH", "second") == b"+OK\r\n"
        # No password any more: nobody may stay locked out (AUTH is refused now).
        assert admin.call("CONFIG", "SET", "requirepass", "") == b"OK"
        assert waiting.raw("PING") == b"+PONG\r\n", "a connection stays locked out without a password"
        assert waiting.raw("AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"
        assert n.client().raw("PING") == b"+PONG\r\n"
    finally:
        n.stop()


# ----------------------------------------------------------------------
# 7. Admin: CLIENT, DEBUG, SHUTDOWN
# ----------------------------------------------------------------------

def _client_list(c):
    return [dict(kv.split("=", 1) for kv in line.split(" "))
            for line in c.call("CLIENT", "LIST").decode().splitlines()]


def _addr(c):
    return "%s:%d" % c.sock.getsockname()


def test_client_list_setname_getname_kill(node):
    a, b, victim = node.client(), node.client(), node.client()
    wait_for(lambda: len(_client_list(a)) == 3, what="3 clients listed")
    assert a.call("CLIENT", "GETNAME") is None
    assert a.call("CLIENT", "SETNAME", "alice") == b"OK"
    assert a.call("CLIENT", "GETNAME") == b"alice"
    assert b.call("CLIENT", "GETNAME") is None
    assert is_error(b.call("CLIENT", "SETNAME", "has space"))
    listed = {e["addr"]: e for e in _client_list(b)}
    assert set(listed) == {_addr(a), _addr(b), _addr(victim)}
    assert listed[_addr(a)]["name"] == "alice" and listed[_addr(b)]["cmd"] == "client"
    assert listed[_addr(victim)]["name"] == ""

    assert b.call("CLIENT", "KILL", _addr(victim)) == b"OK"
    assert victim.closed_within(3), "killed connection still open"
    wait_for(lambda: len(_client_list(b)) == 2, what="the killed client to go")
    assert is_error(b.call("CLIENT", "KILL", _addr(victim)), "ERR No such client")
    # New form, by ID.
    a_id = int({e["addr"]: e for e in _client_list(b)}[_addr(a)]["id"])
    assert b.call("CLIENT", "KILL", "ID", str(a_id)) == 1
    assert a.closed_within(3)
    assert b.call("PING") == b"PONG"
    assert [e["addr"] for e in _client_list(b)] == [_addr(b)]
    b.close()


def test_client_list_age_and_idle(shared, clients):
    active, idle = clients(2)
    time.sleep(1.2)
    assert active.call("PING") == b"PONG"
    listed = {e["addr"]: e for e in _client_list(active)}
    me, other = listed[_addr(active)], listed[_addr(idle)]
    assert int(me["age"]) >= 1 and int(other["age"]) >= 1
    assert me["idle"] == "0", "idle= must count from the last command, not from the connection"
    assert int(other["idle"]) >= 1


def test_client_kill_of_a_blocked_client_frees_it(shared, clients, q):
    blocked, admin = clients(2)
    blocked.send(Client.encode("GETJOB", "FROM", q))
    wait_for(lambda: blocked_on(admin, q) == 1, what="the GETJOB to block")
    assert admin.call("CLIENT", "KILL", "ADDR", _addr(blocked), "TYPE", "normal") == 1
    assert blocked.closed_within(3)
    wait_for(lambda: blocked_on(admin, q) == 0, what="the killed client to be unblocked")
    job_id = admin.call("ADDJOB", q, "not for the killed", "0")
    assert admin.call("QLEN", q) == 1 and show(admin, job_id)[b"state"] == b"queued"


def test_client_reply_off_on_skip(shared, clients, q):
    c, check = clients(2)
    c.send(Client.encode("CLIENT", "REPLY", "OFF") + Client.encode("PING", "hidden")
           + Client.encode("ADDJOB", q, "silent", "0") + Client.encode("CLIENT", "REPLY", "ON")
           + Client.encode("PING", "shown"))
    assert c.read() == b"OK"                           # the reply of CLIENT REPLY ON
    assert c.read() == b"shown"
    assert check.call("QLEN", q) == 1                  # OFF silences replies, not commands
    c.send(Client.encode("CLIENT", "REPLY", "SKIP") + Client.encode("QLEN", q)
           + Client.encode("PING", "after skip") + Client.encode("PING", "again"))
    assert c.read() == b"after skip"
    assert c.read() == b"again"
    assert c.nothing_within(0.05)


def test_debug_sleep_blocks_other_clients(shared, clients):
    sleeper, other = clients(2)
    assert other.call("PING") == b"PONG"
    t0 = time.time()
    sleeper.send(Client.encode("DEBUG", "SLEEP", "0.6"))
    time.sleep(0.05)
    assert other.call("PING") == b"PONG"
    other_done = time.time() - t0
    assert sleeper.read() == b"OK"
    assert other_done >= 0.5, "another client was served during DEBUG SLEEP (%.2fs)" % other_done


def test_debug_flushall(node, client):
    ids = [client.call("ADDJOB", "fq%d" % (i % 3), "x", "0") for i in range(30)]
    delayed = client.call("ADDJOB", "fdelay", "x", "0", "DELAY", "100")
    assert info(client, "jobs")["registered_jobs"] == "31"
    assert client.call("DEBUG", "FLUSHALL") == b"OK"
    assert info(client, "jobs")["registered_jobs"] == "0"
    assert info(client, "queues")["registered_queues"] == "0"
    assert [client.call("QLEN", "fq%d" % i) for i in range(3)] == [0, 0, 0]
    assert client.call("SHOW", ids[0]) is None and client.call("SHOW", delayed) is None
    assert client.call("GETJOB", "NOHANG", "FROM", "fq0", "fq1", "fq2") is None
    assert JOB_ID.fullmatch(client.call("ADDJOB", "fq0", "new", "0"))   # still works after
    assert client.call("QLEN", "fq0") == 1


def test_shutdown_exits_process_and_closes_connections(node):
    bystander, c = node.client(), node.client()
    assert bystander.call("PING") == b"PONG"
    c.send(Client.encode("SHUTDOWN"))
    assert c.closed_within(5), "SHUTDOWN connection not closed"
    assert bystander.closed_within(5), "other connections not closed"
    assert node.proc.wait(10) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", node.port), timeout=1).close()


def test_client_list_many_clients(shared, clients):
    many = clients(20)
    for c in many:
        c.call("PING")
    listed = {e["addr"] for e in _client_list(many[0])}
    assert {_addr(c) for c in many} <= listed
    assert int(info(many[0], "clients")["connected_clients"]) >= 20
