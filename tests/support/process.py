"""Helpers for end-to-end tests: start real ``twistd -n disque`` processes on
127.0.0.1, talk raw RESP to them, run the real ``redis-cli``.

Every node process is started with PR_SET_PDEATHSIG so that it dies with the
test process even if pytest is killed; fixtures also terminate it.  Ports
come from this worker's block (:mod:`tests.support.ports`).  The nodes a
test started, and any still running, have the end of their log shown in
the report of a failed test (``tests/conftest.py``).
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import hiredis

from .ports import free_port  # noqa: F401  (for the tests: a port of this worker)
from .resp import encode_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Every NodeProcess started in this process (the report of a failed test
#: shows those started during the test and those still running).
STARTED = []
_LIVE = []


def nodes_to_show():
    """The nodes whose log a failed test's report shows."""
    shown = list(STARTED)
    shown += [n for n in _LIVE if n not in shown and n.proc is not None and n.proc.poll() is None]
    _LIVE[:] = [n for n in _LIVE if n.proc is not None and n.proc.poll() is None]
    return shown




def _die_with_parent():
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def read_log(path) -> str:
    """The text of a process's log file ("" while there is none)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def twistd_path() -> str:
    candidate = os.path.join(os.path.dirname(sys.executable), "twistd")
    return candidate if os.path.exists(candidate) else shutil.which("twistd")


class NodeProcess:
    """A real ``twistd -n disque`` process."""

    def __init__(self, workdir, port=None, args=(), config=None, host="127.0.0.1", env=None, twistd=None,
                 prefix=()):
        self.twistd = twistd or twistd_path()  # the runtime: the twistd of a venv
        self.prefix = list(prefix)  # runs the node under it (tests/support/netns.py: in a namespace)
        self.host = host
        self.env = env  # extra environment variables
        self.port = port or free_port()
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.args = list(args)
        self.config = config
        self.proc = None
        self.logpath = os.path.join(self.workdir, "twistd-%d.log" % self.port)

    def command(self):
        cmd = self.prefix + [self.twistd, "-n", "--pidfile=", "-l", self.logpath, "disque",
               "--port", str(self.port), "--dir", self.workdir]
        if self.config:
            cmd += ["--config", self.config]
        if self.host != "127.0.0.1":
            cmd += ["--bind", self.host]
        return cmd + self.args

    def start(self, wait=True):
        # No PYTHONPATH help: the node must start from the installed package
        # exactly as the README's quick start runs it.
        env = dict(os.environ, **self.env) if self.env else None
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        if self not in STARTED:
            STARTED.append(self)
        if self not in _LIVE:
            _LIVE.append(self)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=30.0):
        """Return once the node answers PING (or says it is up); bounded by
        ``timeout``.  An answer may take a while on a loaded machine (parallel
        workers): each try waits up to 2 s for it, and a port that is not
        listening yet fails at once."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode(errors="replace")
                raise RuntimeError("node exited with %s:\n%s\n%s" % (self.proc.returncode, out, self.log()))
            try:
                with socket.create_connection((self.host, self.port), timeout=min(2.0, max(deadline - time.time(), 0.05))) as s:
                    s.sendall(b"PING\r\n")
                    # -NOAUTH: up, with requirepass set; -DENIED: up, in protected mode
                    # and we are not on loopback.  (-LOADING: up, loading a big AOF.)
                    if s.recv(64).startswith((b"+PONG\r\n", b"-NOAUTH", b"-DENIED")):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("node on port %d not ready:\n%s" % (self.port, self.log()))

    def log(self):
        return read_log(self.logpath)

    def log_tail(self, lines=80):
        """The last ``lines`` lines of the log, and how the process is."""
        state = "not started" if self.proc is None else (
            "running" if self.proc.poll() is None else "exited with %s" % self.proc.returncode)
        text = self.log().splitlines()
        return "\n".join(["(%s; %d lines, the last %d)" % (state, len(text), min(lines, len(text)))]
                         + text[-lines:])

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self):
        self.stop(signal.SIGKILL)

    def client(self):
        return Client(self.port, host=self.host)


class Client:
    """A minimal blocking RESP client that keeps raw bytes."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = hiredis.Reader()

    def close(self):
        self.sock.close()

    encode = staticmethod(encode_command)

    def send(self, data: bytes):
        self.sock.sendall(data)

    def recv_raw(self, timeout=None) -> bytes:
        """Exactly one reply's bytes."""
        buf = b""
        self.sock.settimeout(timeout or self.sock.gettimeout())
        reader = hiredis.Reader()
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by server after %r" % buf)
            buf += chunk
            reader.feed(chunk)
            if reader.gets() is not False:
                return buf

    def raw(self, *args) -> bytes:
        self.send(self.encode(*args))
        return self.recv_raw()

    def call(self, *args):
        self.send(self.encode(*args))
        return self.read()

    def read(self, timeout=None):
        self.sock.settimeout(timeout or 10.0)
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.reader.feed(chunk)

    def nothing_within(self, seconds) -> bool:
        """True if no byte arrives for ``seconds`` (the connection stays open
        and silent); bytes that do arrive are kept for the next read()."""
        self.sock.settimeout(seconds)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return True
        finally:
            self.sock.settimeout(10.0)
        if chunk:
            self.reader.feed(chunk)
        return False

    def closed_within(self, seconds=5.0) -> bool:
        """True if the server closes the connection within ``seconds``
        (whatever it still sends before closing is discarded)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.sock.settimeout(max(deadline - time.time(), 0.01))
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
        return False


def wait_for(predicate, timeout=5.0, interval=0.02, what="condition"):
    """Poll ``predicate()`` until it returns a true value (returned)."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout, what, value))
        time.sleep(interval)


def read_until_closed(sock, timeout=5.0):
    """Everything the server sends until it closes the connection."""
    buf = b""
    deadline = time.time() + timeout
    sock.settimeout(0.2)
    while time.time() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return buf, True
        if not chunk:
            return buf, True
        buf += chunk
    return buf, False


def connect_when_listening(node, timeout=15):
    """A client of ``node`` (a NodeProcess started with ``wait=False``) as
    soon as its port takes connections (it may still answer -LOADING)."""
    def attempt():
        if node.proc.poll() is not None:
            raise AssertionError("node exited: %s" % node.log())
        try:
            return node.client()
        except OSError:
            return None
    return wait_for(attempt, timeout=timeout, interval=0.05, what="the client port")


def parse_info(text) -> dict:
    """INFO text -> {field: value (str)}."""
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            out[key] = value
    return out


def info(client, section="default") -> dict:
    return parse_info(client.call("INFO", section))


def run_twistd(args, cwd, timeout=20, env=None):
    """Run ``twistd -n --pidfile= disque ARGS`` to completion (for start-up
    failures), with the extra environment variables ``env``; return
    (returncode, combined stdout + stderr as str)."""
    p = subprocess.run([twistd_path(), "-n", "--pidfile=", "disque", *args], cwd=str(cwd),
                       env=dict(os.environ, **env) if env else None,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       preexec_fn=_die_with_parent)
    return p.returncode, p.stdout.decode(errors="replace")


def redis_cli(port, *args, stdin=None):
    """Run the real redis-cli; return (returncode, stdout)."""
    exe = shutil.which("redis-cli")
    assert exe, "redis-cli not installed (apt-get install redis-tools; .ci/run does it)"
    p = subprocess.run([exe, "-p", str(port), *args], input=stdin, capture_output=True, timeout=30)
    return p.returncode, p.stdout


def start_cluster(workdir, n, args=(), timeout=30.0, env=None, twistd=None, hosts=None):
    """``n`` real nodes, joined by a chain of MEETs (node i meets node i+1),
    returned once every node reaches all the others.  All on 127.0.0.1, or
    node i on ``hosts[i]`` (its clients, bus and outgoing links there)."""
    hosts = hosts or ["127.0.0.1"] * n
    nodes = [NodeProcess(os.path.join(str(workdir), "node%d" % i), args=args, env=env, twistd=twistd, host=hosts[i])
             for i in range(n)]
    return join_nodes(nodes, timeout)


def mesh_fixture(n, scope="function", args=()):
    """A pytest fixture: ``n`` fresh real nodes in a full mesh
    (:func:`start_cluster`, with ``args`` on each node's command line),
    killed after the test, or after the module with ``scope="module"``
    (its tests share the nodes and use their own queue names).  The
    process tier's ``trio``, ``pair`` and ``spark_cluster``
    (tests/process/conftest.py) are made with it, and so is a module's
    own mesh: ``trio = mesh_fixture(3, scope="module")``."""
    import pytest  # here: the tools under tests/tools import this module outside pytest

    def nodes(tmp_path_factory):
        mesh = start_cluster(tmp_path_factory.mktemp("mesh%d-" % n), n, args=args)
        yield mesh
        for node in mesh:
            node.kill()

    nodes.__doc__ = "%d fresh real nodes in a full mesh%s, killed after the %s." % (
        n, " (%s)" % " ".join(args) if args else "", "test" if scope == "function" else scope)
    return pytest.fixture(scope=scope)(nodes)


def join_nodes(nodes, timeout=30.0, ready_timeout=None):
    """Start ``nodes`` (NodeProcess, or any with its start/wait_ready/
    client/kill), join them by a chain of MEETs and return them once every
    node reaches all the others; all killed if one fails.
    ``ready_timeout``: for each node's start (its default when None)."""
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            if ready_timeout is None:
                node.wait_ready()
            else:
                node.wait_ready(timeout=ready_timeout)
        for a, b in zip(nodes, nodes[1:]):
            c = a.client()
            try:
                assert c.call("CLUSTER", "MEET", b.host, str(b.port)) == b"OK"
            finally:
                c.close()
        wait_full_mesh(nodes, timeout)
    except BaseException:
        for node in nodes:
            node.kill()
        raise
    return nodes


def cluster_info(node) -> dict:
    c = node.client()
    try:
        text = c.call("CLUSTER", "INFO").decode()
    finally:
        c.close()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def wait_full_mesh(nodes, timeout=30.0):
    n = len(nodes)

    def meshed():
        for node in nodes:
            info = cluster_info(node)
            if info["cluster_known_nodes"] != str(n) or info["cluster_reachable_nodes"] != str(n - 1):
                return False
        return True

    wait_for(meshed, timeout=timeout, interval=0.1, what="a full mesh of %d nodes" % n)


TENANT_USERS = ("user alice on >alicepw ~a:* +@all", "user bob on >bobpw ~b:* +@all")


def start_tenants(workdir) -> NodeProcess:
    """A started node with two tenants: user ``alice`` (password
    ``alicepw``) on the queues ``a:*``, user ``bob`` (``bobpw``) on ``b:*``."""
    os.makedirs(str(workdir), exist_ok=True)
    config = os.path.join(str(workdir), "tenants.conf")
    with open(config, "w") as f:
        f.write("".join(line + "\n" for line in TENANT_USERS))
    return NodeProcess(workdir, config=config).start()


def call(node, *args):
    """One command on a fresh connection to ``node``."""
    c = node.client()
    try:
        return c.call(*args)
    finally:
        c.close()


def show(node, job_id) -> dict:
    reply = call(node, "SHOW", job_id)
    if reply is None:
        return None
    return dict(zip(reply[::2], reply[1::2]))
