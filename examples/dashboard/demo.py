"""A live 3-node cluster with moving queues, to look at in the dashboard.

    python examples/dashboard/demo.py [--port 7711] [--password demo] [--duration 0]

Starts three ``twistd -n disque`` nodes on 127.0.0.1 (RESP on ``port``,
``port+1``, ``port+2``; the dashboard on ``port+1000`` ...; the cluster bus
on ``port+10000`` ...), joins them, and runs producers and consumers:

* ``orders``      steady, consumed as fast as it comes, a few NACKs;
* ``emails``      bursts every 30 s that the consumers drain slowly;
* ``thumbnails``  consumers slower than the producer: it grows;
* ``reports``     added, never consumed: its oldest job gets older;
* ``webhooks``    paused out on every node (PAUSE ... out BCAST).

Open http://127.0.0.1:8711/ (any user name, the password) and watch.
Ctrl-C stops the workload and the nodes; their files were in a temporary
directory, removed at exit.  Run it with the Python of the venv where
disque is installed (its ``twistd`` is used).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from disque.client import BlockingClient

NODES = 3


def twistd():
    path = os.path.join(os.path.dirname(sys.executable), "twistd")
    return path if os.path.exists(path) else shutil.which("twistd")


def _die_with_parent():
    """Linux: the nodes get SIGTERM if this script dies without stopping them."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Demo:
    def __init__(self, port=7711, password="demo", workdir=None):
        self.ports = [port + i for i in range(NODES)]
        self.http_ports = [p + 1000 for p in self.ports]
        self.password = password
        self.workdir = workdir or tempfile.mkdtemp(prefix="disque-demo-")
        self.procs = []
        self.threads = []
        self.stopping = threading.Event()

    @property
    def urls(self):
        return ["http://127.0.0.1:%d/" % p for p in self.http_ports]

    # -- the nodes ------------------------------------------------------------

    def start_nodes(self):
        busy = [p for p in self.ports + self.http_ports + [p + 10000 for p in self.ports] if not port_free(p)]
        if busy:
            raise SystemExit("ports in use: %s (choose others with --port)" % ", ".join(map(str, busy)))
        for i, (port, http_port) in enumerate(zip(self.ports, self.http_ports)):
            directory = os.path.join(self.workdir, "node%d" % (i + 1))
            os.makedirs(directory)
            cmd = [twistd(), "-n", "--pidfile=", "-l", os.path.join(directory, "twistd.log"), "disque",
                   "--port", str(port), "--dir", directory, "--requirepass", self.password,
                   "--set", "http-port=%d" % http_port]
            self.procs.append(subprocess.Popen(cmd, cwd=directory, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.STDOUT,
                                               preexec_fn=_die_with_parent))
        for port in self.ports:
            self._wait_ready(port)
        first = self.client(0)
        for port in self.ports[1:]:
            first.cluster_meet("127.0.0.1", port)
        deadline = time.time() + 30
        while time.time() < deadline:
            if all(self._reachable(i) == NODES - 1 for i in range(NODES)):
                break
            time.sleep(0.2)
        first.close()

    def _wait_ready(self, port, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64):
                        return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("node on port %d did not start (see %s)" % (port, self.workdir))

    def _reachable(self, i):
        c = self.client(i)
        try:
            return int(c.cluster_info().get("cluster_reachable_nodes", 0))
        finally:
            c.close()

    def client(self, i):
        """A client of node ``i`` only (the workload spreads itself)."""
        return BlockingClient(["127.0.0.1:%d" % self.ports[i]], password=self.password, discover=False)

    # -- the workload ------------------------------------------------------------

    def _loop(self, fn):
        def run():
            while not self.stopping.is_set():
                try:
                    fn()
                except Exception:  # a node stopping under us: the demo goes on
                    if self.stopping.wait(0.5):
                        return
        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def _producer(self, queue, rate, burst=None):
        """``rate`` jobs a second to random nodes (node 1 gets half);
        ``burst``: (period s, length s, rate) of extra jobs."""
        clients = [self.client(i) for i in range(NODES)]
        n = [0]

        def step():
            now = time.time()
            r = rate
            if burst and now % burst[0] < burst[1]:
                r += burst[2]
            r *= random.uniform(0.6, 1.4)
            node = random.choices(range(NODES), weights=(5, 3, 2))[0]
            n[0] += 1
            body = json.dumps({"n": n[0], "queue": queue, "at": round(now, 3),
                               "payload": "%s #%d for customer %d" % (queue[:-1], n[0], random.randint(1000, 9999))})
            clients[node].add_job(queue, body.encode(), retry=20)
            self.stopping.wait(1.0 / r)
        self._loop(step)

    def _consumer(self, node, queue, rate, nack=0.0):
        client = self.client(node)

        def step():
            jobs = client.get_jobs(queue, count=1, timeout=500)
            for job in jobs:
                if random.random() < nack:
                    client.nack(job)
                else:
                    client.ack(job)
            if jobs:
                self.stopping.wait(random.expovariate(rate))
        self._loop(step)

    def start_workload(self):
        c = self.client(0)
        c.pause("webhooks", "out", "bcast")
        for i in range(4):
            c.add_job("webhooks", json.dumps({"hook": i, "url": "https://example.com/hook/%d" % i}).encode())
        c.close()
        self._producer("orders", 8)
        self._producer("emails", 1, burst=(30, 8, 12))
        self._producer("thumbnails", 4)
        self._producer("reports", 0.5)
        self._producer("webhooks", 0.3)
        for node in range(NODES):
            self._consumer(node, "orders", 4, nack=0.04)
            self._consumer(node, "emails", 1.3)
            self._consumer(node, "thumbnails", 0.9, nack=0.1)

    # -- all of it -----------------------------------------------------------------

    def start(self):
        self.start_nodes()
        self.start_workload()
        return self

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(2)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=7711, help="RESP port of node 1 (default 7711)")
    parser.add_argument("--password", default="demo", help="requirepass of the nodes (default demo)")
    parser.add_argument("--duration", type=float, default=0, help="stop after so many seconds (0: at Ctrl-C)")
    args = parser.parse_args()
    demo = Demo(args.port, args.password)
    signal.signal(signal.SIGTERM, lambda *_: demo.stopping.set())
    try:
        demo.start()
        print("disque dashboard demo: %d nodes, password %r (any user name)" % (NODES, args.password))
        for i, url in enumerate(demo.urls):
            print("  node %d  %s   (RESP 127.0.0.1:%d)" % (i + 1, url, demo.ports[i]))
        print("Ctrl-C stops the workload and the nodes.")
        sys.stdout.flush()
        demo.stopping.wait(args.duration or None)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()


if __name__ == "__main__":
    main()
