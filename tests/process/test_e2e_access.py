"""Access on real processes: protected mode seen from another host (a node
in a network namespace, real redis-cli on both sides), MONITOR watched by
real redis-cli while secrets go by, and a source that keeps failing AUTH
refused."""

import os
import selectors
import socket
import subprocess
import time

import hiredis

from tests.support import netns
from tests.support.process import Client, NodeProcess, wait_for


ns = netns.fixture()


def test_protected_mode_denies_clients_from_other_hosts(ns, tmp_path):
    """Defaults but for bind (loopback and the namespace's address): a
    client from another host gets -DENIED, one on loopback is served.  (A
    cluster-password, so the bus beyond loopback may start.)"""
    node = NodeProcess(tmp_path / "n", host=ns.inside, prefix=ns.prefix,
                       args=["--bind", "127.0.0.1 " + ns.inside, "--set", "cluster-password=somesecret"]).start()
    try:
        port = str(node.port)
        stranger = subprocess.run(["redis-cli", "-h", ns.inside, "-p", port, "ping"], capture_output=True,
                                  timeout=30)
        assert b"DENIED Disque is running in protected mode because protected mode is enabled and no password " \
               b"is set for the default user." in stranger.stdout + stranger.stderr
        assert b"PONG" not in stranger.stdout
        assert ns.run("redis-cli", "-h", "127.0.0.1", "-p", port, "ping").stdout == "PONG\n"
        # from inside the namespace too, a client dialling the address beyond loopback is a stranger
        assert "DENIED" in ns.run("redis-cli", "-h", ns.inside, "-p", port, "ping", check=False).stdout
        wait_for(lambda: "Refused client from %s: protected mode is enabled" % ns.outside in node.log(),
                 what="the refusal in the node's log")
    finally:
        node.stop()


def _lines_until(proc, marker, timeout=10.0):
    """What ``proc`` writes to stdout until a line holding ``marker``."""
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    out = b""
    deadline = time.time() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while marker not in out:
            left = deadline - time.time()
            assert left > 0, "no %r from redis-cli MONITOR within %.0f s: %r" % (marker, timeout, out)
            if sel.select(left):
                chunk = os.read(fd, 65536)
                assert chunk, "redis-cli MONITOR ended: %r" % out
                out += chunk
    return out


def test_redis_cli_monitor_sees_no_secret(tmp_path):
    node = NodeProcess(tmp_path / "n", args=["--requirepass", "pw1"]).start()
    monitor = subprocess.Popen(["redis-cli", "-p", str(node.port), "MONITOR"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=dict(os.environ, REDISCLI_AUTH="pw1"))
    client = node.client()
    try:
        assert client.call("AUTH", "pw1") == b"OK"
        wait_for(lambda: b"flags=O" in client.call("CLIENT", "LIST"), what="redis-cli in MONITOR")
        assert client.call("AUTH", "pw1") == b"OK"
        assert client.call("CONFIG", "SET", "cluster-password", "topsecret-bus") == b"OK"
        assert client.call("PING", "done") == b"done"
        seen = _lines_until(monitor, b'"PING" "done"')
    finally:
        monitor.kill()
        monitor.wait()
        client.close()
        node.stop()
    assert b'"AUTH" "(redacted)"' in seen and b'"CONFIG" "SET" "cluster-password" "(redacted)"' in seen
    assert b"pw1" not in seen and b"topsecret-bus" not in seen


def _client_from(source, port):
    """A Client whose connection comes from ``source`` (another loopback
    address: another source for the node)."""
    client = Client.__new__(Client)
    client.sock = socket.create_connection(("127.0.0.1", port), timeout=10.0, source_address=(source, 0))
    client.reader = hiredis.Reader()
    return client


def test_a_source_that_keeps_failing_is_refused(tmp_path):
    node = NodeProcess(tmp_path / "n", args=["--requirepass", "s3cret"]).start()
    guesser, other = node.client(), _client_from("127.0.0.2", node.port)
    try:
        guesser.send(Client.encode("AUTH", "guess") * 11)  # checked at once; 4th to 10th answered late
        started = time.time()
        replies = [guesser.read() for _ in range(11)]
        assert 1.5 < time.time() - started < 10
        assert [str(r) for r in replies[:10]] == ["ERR invalid password"] * 10
        assert str(replies[10]) == "ERR too many failed authentication attempts from 127.0.0.1: retry in 60 seconds"
        again = node.client()
        assert "retry in" in str(again.call("AUTH", "s3cret"))  # the source is refused, not the connection
        again.close()
        assert other.call("AUTH", "s3cret") == b"OK"  # another source is not held up
        stats = other.call("INFO", "stats")
        for field in (b"auth_failures:10\r\n", b"auth_delayed:7\r\n", b"auth_refused:2\r\n"):
            assert field in stats
    finally:
        guesser.close()
        other.close()
        node.stop()
