#!/usr/bin/env python
"""Fuzz the request parser, the bus codec and a live node.

    .venv/bin/python -m tests.tools.fuzz --target resp|bus|all --count 1000000 --seed N [--live]

In process (the default), every generated input (``tests/tools/fuzzgen.py``)
goes through the real parser:

* RESP: ``RequestParser`` fed the input whole and again split at random
  byte boundaries (now and then byte by byte).  Both must give the same
  commands and the same ``ProtocolError`` (the codec's documented
  split-independence); a valid request must give exactly its argv; the
  bytes buffered after each read stay within the limits (a line waits for
  at most ``max_inline_len`` bytes, a payload for its declared size); any
  exception but ``ProtocolError`` is a finding.
* bus: ``wire.decode`` must return exactly the message a valid frame was
  encoded from, raise ``WireError`` (and nothing else) on an invalid one;
  every frame that decodes is then handed to a pure node core
  (``SimCluster``) as if a known peer had sent it, and the core must not
  raise; its node file must stay loadable.

``--live`` runs the same inputs against a real ``twistd -n disque`` node
over sockets (``--target resp``: its client port from many concurrent
connections; ``bus``: its bus port, each connection announcing itself with
a MEET first, from a sender that joined the node's cluster by answering
its link back (:class:`FuzzPeers`), so that job messages reach their
handlers), while a victim
client's jobs sit in a queue no fuzz input names.  After every batch the
node must answer PING within ``--ping-timeout`` seconds; at the end its
log must hold no traceback, the victim's jobs must be exactly as added
(SHOW, QLEN, GETJOB), and the RSS growth of the second half of the run
(after the first half warmed the allocator; the fuzzer's own jobs are
deleted after every batch) must stay under ``--rss-bound`` MB.

Exit status 0 when there is no finding, 1 otherwise; the summary goes to
stdout (``--json`` adds a machine-readable line).
"""

import argparse
import json
import random
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter

import hiredis

from tests.tools.fuzzgen import ANY, BusGen, RespGen

from disque.bus import wire  # noqa: E402
from disque.core import messages  # noqa: E402
from disque.core.membership import parse_nodes_file  # noqa: E402
from disque.resp.codec import ProtocolError, RequestParser  # noqa: E402

MAX_FINDINGS_KEPT = 20
#: The inline/header line limit of the node's parser (RequestParser's default).
INLINE_LIMIT = 64 * 1024


class Report:
    """Counts and findings of one run."""

    def __init__(self, target, mode):
        self.target = target
        self.mode = mode
        self.by_category = Counter()
        self.findings = []  # (category, text, input)
        self.finding_count = 0
        self.seconds = 0.0
        self.extra = {}

    @property
    def count(self):
        return sum(self.by_category.values())

    def finding(self, category, text, data=b""):
        self.finding_count += 1
        if len(self.findings) < MAX_FINDINGS_KEPT:
            self.findings.append((category, text, data[:300]))

    def summary(self):
        rate = self.count / self.seconds if self.seconds else 0.0
        lines = ["%s %s: %d inputs in %.1f s (%.0f/s), %d findings" % (
            self.target, self.mode, self.count, self.seconds, rate, self.finding_count)]
        lines.append("  by category: " + ", ".join("%s %d" % kv for kv in sorted(self.by_category.items())))
        for k, v in self.extra.items():
            lines.append("  %s: %s" % (k, v))
        for cat, text, data in self.findings:
            lines.append("  FINDING [%s] %s\n    input: %r" % (cat, text, data))
        return "\n".join(lines)

    def as_dict(self):
        return {"target": self.target, "mode": self.mode, "count": self.count, "seconds": round(self.seconds, 2),
                "by_category": dict(self.by_category), "findings": self.finding_count, **self.extra}


def _exc(e):
    return "%s: %s" % (type(e).__name__, e) + " at " + traceback.extract_tb(e.__traceback__)[-1].line


# -- in process: the request parser ------------------------------------------

def split_points(rng, data):
    """``data`` cut at random byte boundaries (byte by byte now and then)."""
    n = len(data)
    if n <= 1:
        return [data]
    if n <= 400 and rng.random() < 0.02:
        return [data[i:i + 1] for i in range(n)]
    cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 6))))
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [n])]


def parse_reads(reads, parser=None):
    """What the node's protocol does with these reads: (commands, error or
    None, parser); asserts the buffer bounds after each read."""
    p = parser or RequestParser()
    limit = INLINE_LIMIT
    cmds = []
    for data in reads:
        try:
            out = p.feed_parse(data)
            cmds += out
            if out and p.failed():
                p.parse()
        except ProtocolError as e:
            return cmds, e.args[0], p
        if p.failed():
            raise AssertionError("failed() with no error raised")
        bound = p._bulklen + 2 if p._bulklen >= 0 else limit + 1
        if p.pending() > bound:
            raise AssertionError("%d bytes buffered, bound %d" % (p.pending(), bound))
    try:
        again = p.parse()
    except ProtocolError as e:
        raise AssertionError("an error raised late: %r" % (e,))
    if again:
        raise AssertionError("parse() found more commands with no new data: %r" % (again,))
    return cmds, None, p


def check_resp(rng, data, expected):
    """None, or the text of a finding."""
    try:
        whole = parse_reads([data])
        split = parse_reads(split_points(rng, data))
    except ProtocolError as e:  # escaped the protocol's handling: raised where it must not be
        return "ProtocolError escaped: %r" % (e,)
    except AssertionError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - any other exception is what we look for
        return _exc(e)
    if whole[:2] != split[:2]:
        return "whole %r != split %r" % (whole[:2], split[:2])
    if expected is not None and (whole[0] != expected or whole[1] is not None):
        return "expected %r, got %r" % (expected, whole[:2])
    return None


def run_in_process(report, gen, count, check, progress=None):
    """``count`` inputs of ``gen`` through ``check(data, expected)`` (None
    or a finding's text), counted in ``report``."""
    t0 = time.perf_counter()
    for i in range(count):
        cat, data, expected = gen.next()
        report.by_category[cat] += 1
        problem = check(data, expected)
        if problem is not None:
            report.finding(cat, problem, data)
        if progress and i and i % progress == 0:
            print("  %s %d (%.0f/s)" % (report.target, i, i / (time.perf_counter() - t0)), file=sys.stderr)
    report.seconds = time.perf_counter() - t0
    return report


def fuzz_resp(count, seed, report=None, progress=None):
    rng = random.Random(seed ^ 0x5EED)
    return run_in_process(report or Report("resp", "in-process"), RespGen(seed), count,
                          lambda data, expected: check_resp(rng, data, expected), progress)


# -- in process: the bus codec and a node core --------------------------------

class CoreHarness:
    """A 2-node SimCluster; frames are delivered to node 0 as if node 1 (a
    known peer) had sent them, or from their own sender (unknown, hostile).
    Rebuilt every ``RESET`` messages so its state stays small."""

    RESET = 5000

    def __init__(self, seed):
        from disque.testing import SimCluster
        self._sim_class = SimCluster
        self.seed = seed
        self.delivered = 0
        self._build()

    def _build(self):
        sim = self.sim = self._sim_class(2, seed=self.seed)
        sim.chain_meet()
        sim.settle(2000)
        self.peer = sim.nodes[1].my_id
        self.link = sim.outbound[1][sim.nodes[0].my_id].other  # node 0's end of node 1's link

    def deliver(self, header, msg, as_peer):
        sim = self.sim
        if as_peer:
            header = header._replace(sender=self.peer)
        sim.queue.append((1, 0, header, msg, self.link))
        sim.pump(10_000)
        self.delivered += 1
        if self.delivered % 50 == 0:
            sim.advance(1000, step=1000)  # timers: retries, TTLs, GC of the hostile jobs
            sim.delivered.clear()
            sim.replies.clear()
            sim.notices.clear()
            parse_nodes_file(sim.nodes[0].cluster.nodes_file_text())
        if self.delivered % self.RESET == 0:
            self._build()


def check_bus(frame, expected, core=None, rng=None):
    """None, or the text of a finding."""
    try:
        got = wire.decode(frame)
    except wire.WireError:
        got = None
    except Exception as e:  # noqa: BLE001
        return "decode: " + _exc(e)
    if expected is None and got is not None:
        return "an invalid frame decoded: %r" % (got,)
    if expected is not ANY and expected is not None and got != expected:
        return "decoded %r, expected %r" % (got, expected)
    if got is not None and core is not None:
        try:
            core.deliver(got[0], got[1], rng.random() < 0.8)
        except Exception as e:  # noqa: BLE001
            core._build()
            return "core: " + _exc(e)
    return None


def fuzz_bus(count, seed, report=None, progress=None, core=True):
    rng = random.Random(seed ^ 0xB05)
    harness = CoreHarness(seed) if core else None
    return run_in_process(report or Report("bus", "in-process"), BusGen(seed), count,
                          lambda frame, expected: check_bus(frame, expected, harness, rng), progress)


# -- live ---------------------------------------------------------------------

def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Pump:
    """Many concurrent connections, each writing its payload in random
    pieces while its replies are read, until the node closes it (EOF after
    our half-close, or after a protocol error).  With ``check_replies``
    each connection's replies go through hiredis: bytes that are not RESP
    are counted in ``bad_replies`` (``bad_sample`` keeps the first)."""

    def __init__(self, host, port, rng, concurrency, close_timeout, check_replies=False):
        self.addr = (host, port)
        self.rng = rng
        self.concurrency = concurrency
        self.close_timeout = close_timeout
        self.sel = selectors.DefaultSelector()
        self.stuck = 0  # connections the node left open past close_timeout
        self.stuck_sample = []  # (local port, bytes sent, payload's start, the node's view) of the first few
        self.describe = None  # port -> what the node says of that connection
        self.refused = 0
        self.check_replies = check_replies
        self.replies = 0
        self.bad_replies = 0
        self.bad_sample = None

    def run(self, payloads):
        sel, rng = self.sel, self.rng
        todo = list(reversed(payloads))
        live = 0
        while todo or live:
            while todo and live < self.concurrency:
                data = todo.pop()
                try:
                    s = socket.create_connection(self.addr, timeout=5)
                except OSError:
                    self.refused += 1
                    continue
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.setblocking(False)
                reader = hiredis.Reader() if self.check_replies else None
                sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, [memoryview(data), 0, None, reader])
                live += 1
            for key, ev in sel.select(timeout=1.0):
                s, st = key.fileobj, key.data
                done = False
                if ev & selectors.EVENT_READ:
                    try:
                        chunk = s.recv(262144)
                        if not chunk:
                            done = True
                        elif st[3] is not None:
                            self._replies(st, chunk)
                    except BlockingIOError:
                        pass
                    except OSError:
                        done = True
                if not done and ev & selectors.EVENT_WRITE:
                    view, off = st[0], st[1]
                    try:
                        n = s.send(view[off:off + rng.choice((1, 7, 64, 1500, 8192, 65536))])
                        st[1] = off + n
                    except BlockingIOError:
                        pass
                    except OSError:
                        done = True
                    if not done and st[1] >= len(view):
                        try:
                            s.shutdown(socket.SHUT_WR)
                        except OSError:
                            done = True
                        st[2] = time.monotonic()
                        sel.modify(s, selectors.EVENT_READ, st)
                if not done and st[2] is not None and time.monotonic() - st[2] > self.close_timeout:
                    self._stuck(s, st)
                    done = True
                if done:
                    sel.unregister(s)
                    s.close()
                    live -= 1
            now = time.monotonic()
            for key in list(sel.get_map().values()):  # noqa: B007  # idle ones the select above did not return
                st = key.data
                if st[2] is not None and now - st[2] > self.close_timeout:
                    self._stuck(key.fileobj, st)
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    live -= 1


    def _stuck(self, s, st):
        self.stuck += 1
        if len(self.stuck_sample) < 3:
            port = s.getsockname()[1]
            seen = self.describe(port) if self.describe else None
            self.stuck_sample.append((port, st[1], bytes(st[0][:200]), seen))

    def _replies(self, st, chunk):
        reader = st[3]
        reader.feed(chunk)
        try:
            while reader.gets() is not False:
                self.replies += 1
        except hiredis.ProtocolError as e:
            self.bad_replies += 1
            if self.bad_sample is None:
                self.bad_sample = "%s in %r" % (e, chunk[:300])
            st[3] = None


class LiveNode:
    """A real node (tests/support/process.py NodeProcess), a control client and a
    victim client with its jobs."""

    VICTIMS = 50

    NODE_TIMEOUT_MS = 1000  # handshakes with addresses nobody answers at expire after this

    def __init__(self, workdir, rng, env=None, settings=()):
        from tests.support.process import Client, NodeProcess
        self.Client = Client
        args = ["--cluster-node-timeout", str(self.NODE_TIMEOUT_MS)]
        for setting in settings:
            args += ["--set", setting]
        self.node = NodeProcess(workdir, args=args, env=env).start()
        self.ctl = Client(self.node.port)
        self.victim = Client(self.node.port)
        self.queue = b"victim:" + rng.randbytes(8).hex().encode()
        self.jobs = {}
        for i in range(self.VICTIMS):
            body = rng.randbytes(rng.randint(0, 200)) + b"\r\n*1\r\n$4\r\nPING\r\n" * (i % 2)
            job_id = self.victim.call(b"ADDJOB", self.queue, body, b"0", b"TTL", b"86400", b"RETRY", b"3600")
            self.jobs[job_id] = body

    @property
    def pid(self):
        return self.node.proc.pid

    def alive(self):
        return self.node.proc.poll() is None

    def ping(self, timeout):
        """PING on a fresh connection, answered within ``timeout`` s."""
        c = self.Client(self.node.port, timeout=timeout)
        try:
            return c.call(b"PING") == b"PONG"
        finally:
            c.close()

    def delete_fuzz_jobs(self):
        """Delete every job not in the victim's queue (the fuzzer's own)."""
        ctl = self.ctl
        cursor = b"0"
        deleted = 0
        while True:
            cursor, ids = ctl.call(b"JSCAN", cursor, b"COUNT", b"1000", b"REPLY", b"all")
            doomed = [j[1] for j in ids if dict(zip(j[::2], j[1::2])).get(b"queue") != self.queue]
            if doomed:
                ctl.call(b"DELJOB", *doomed)
                deleted += len(doomed)
            if cursor == b"0":
                return deleted

    def check_victim(self):
        """Problems with the victim's jobs (empty when intact)."""
        problems = []
        v = self.victim
        for job_id, body in self.jobs.items():
            shown = v.call(b"SHOW", job_id)
            if shown is None:
                problems.append("job %r gone" % job_id)
                continue
            fields = dict(zip(shown[::2], shown[1::2]))
            if fields.get(b"body") != body or fields.get(b"queue") != self.queue or fields.get(b"state") != b"queued":
                problems.append("job %r changed: %r" % (job_id, fields))
        qlen = v.call(b"QLEN", self.queue)
        if qlen != len(self.jobs):
            problems.append("QLEN %r, expected %d" % (qlen, len(self.jobs)))
        got = v.call(b"GETJOB", b"NOHANG", b"COUNT", b"%d" % (len(self.jobs) + 10), b"FROM", self.queue)
        got = {j[1]: j[2] for j in got or ()}
        if got != self.jobs:
            problems.append("GETJOB gave %d jobs, %d expected or bodies differ" % (len(got), len(self.jobs)))
        return problems

    def log_problems(self):
        text = self.node.log()
        return [line for line in text.splitlines() if "Traceback" in line or "Unhandled" in line
                or "Error:" in line and "Dropping bus link" not in line]

    def client_line(self, port):
        """The CLIENT LIST line of our connection from ``port``, if any."""
        text = self.ctl.call(b"CLIENT", b"LIST").decode(errors="replace")
        return next((line for line in text.splitlines() if ":%d " % port in line), None)

    def cluster_nodes(self):
        return self.ctl.call(b"CLUSTER", b"NODES").decode(errors="replace").strip().splitlines()

    def is_member(self, node_id):
        """``node_id`` is in CLUSTER NODES, not in handshake."""
        return any(line.split()[0] == node_id.decode() and "handshake" not in line.split()[2]
                   for line in self.cluster_nodes())

    def stop(self):
        for c in (self.ctl, self.victim):
            c.close()
        self.node.stop()


class FuzzPeers:
    """The live bus fuzzer's senders as members of the node's cluster.  A
    MEET from an unknown node only makes a claim, which joins once it
    answers the node's own link as the node it claims to be
    (disque.core.membership): each sender gets a bus port of its own on
    127.0.0.1, where a thread answers every PING and MEET with a PONG from
    that sender (and reads and drops whatever else the node sends)."""

    HOST = b"127.0.0.1"

    def __init__(self, senders):
        self.sel = selectors.DefaultSelector()
        self.ports = {}  # sender -> the client port it announces (its bus: + 10000)
        for sender in senders:
            listener = socket.socket()
            listener.bind((self.HOST.decode(), 0))
            while listener.getsockname()[1] <= 10000:  # a client port must exist below it
                listener.close()
                listener = socket.socket()
                listener.bind((self.HOST.decode(), 0))
            listener.listen(16)
            listener.setblocking(False)
            self.ports[sender] = listener.getsockname()[1] - 10000
            self.sel.register(listener, selectors.EVENT_READ, (sender, None))
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def meet(self, sender):
        """A framed MEET from ``sender``, announcing its own bus port."""
        frame = wire.encode(messages.Header(sender, self.HOST, self.ports[sender], 0), messages.Meet(()))
        return _FRAME_LEN(len(frame)) + frame

    def _serve(self):
        while self.running:
            for key, _ in self.sel.select(0.1):
                sender, buf = key.data
                if buf is None:  # a listener: the node's link connects
                    conn, _ = key.fileobj.accept()
                    conn.setblocking(False)
                    self.sel.register(conn, selectors.EVENT_READ, (sender, bytearray()))
                    continue
                try:
                    data = key.fileobj.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(key.fileobj)
                    key.fileobj.close()
                    continue
                buf += data
                self._answer(key.fileobj, sender, buf)

    def _answer(self, conn, sender, buf):
        while len(buf) >= 4:
            n = wire._U32.unpack_from(buf)[0]
            if len(buf) < 4 + n:
                return
            frame = bytes(buf[4:4 + n])
            del buf[:4 + n]
            try:
                _, msg = wire.decode(frame)
            except wire.WireError:
                continue
            if type(msg) in (messages.Ping, messages.Meet):
                pong = wire.encode(messages.Header(sender, self.HOST, self.ports[sender], 0), messages.Pong(()))
                try:
                    conn.sendall(_FRAME_LEN(len(pong)) + pong)
                except OSError:
                    return

    def stop(self):
        self.running = False
        self.thread.join()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()


def _connection_payloads(rng, items, per_conn, prefix=b""):
    """Group ``items`` ((data, clean) pairs) into connection payloads: up
    to ``per_conn`` clean inputs, and a connection ends after the first
    input that is not clean (the node closes it there)."""
    out, cur, n = [], [prefix] if prefix else [], 0
    limit = rng.randint(1, per_conn)
    for data, clean in items:
        cur.append(data)
        n += 1
        if not clean or n >= limit:
            out.append(b"".join(cur))
            cur, n = [prefix] if prefix else [], 0
            limit = rng.randint(1, per_conn)
    if n:
        out.append(b"".join(cur))
    return out


def _resp_clean(data):
    p = RequestParser()
    try:
        p.feed_parse(data)
        p.parse()
    except ProtocolError:
        return False
    return p.pending() == 0 and not p.failed()


_FRAME_LEN = wire._U32.pack


def _bus_items(gen, rng, n, report, announced):
    """Framed inputs; ``announced`` gets the sender of every MEET among
    them (the open bus adds those: expected members, not bogus ones)."""
    items = []
    for _ in range(n):
        cat, frame, expected = gen.next()
        report.by_category[cat] += 1
        try:
            header, msg = wire.decode(frame)
            if type(msg) is messages.Meet:
                announced.add(header.sender)
        except wire.WireError:
            pass
        clean = expected is not None and expected is not ANY
        data = _FRAME_LEN(len(frame)) + frame
        if not clean and rng.random() < 0.05:  # a hostile length prefix instead
            data = rng.choice([_FRAME_LEN(0xFFFFFFFF), _FRAME_LEN(600 << 20), _FRAME_LEN(len(frame) + 100) + frame,
                               b"\x00\x00"])
        items.append((data, clean))
    return items


def _end_checks(report, live, senders, rss):
    """The victim's jobs, the cluster table, the RSS once the fuzzer's own
    jobs are deleted."""
    if not live.alive():
        return
    live.delete_fuzz_jobs()
    time.sleep(0.5)
    rss["end"] = rss_kb(live.pid)
    for problem in live.check_victim():
        report.finding("victim", problem)
    # Gossip about unknown nodes starts handshakes; nobody answers at those
    # addresses, so they must expire (after the node timeout, 1 s here).
    nodes = live.cluster_nodes()
    report.extra["handshakes pending after the run"] = sum(1 for line in nodes if " handshake " in line)
    deadline = time.monotonic() + 10 * live.NODE_TIMEOUT_MS / 1000.0 + 5
    while any(" handshake " in line for line in nodes) and time.monotonic() < deadline:
        time.sleep(0.5)
        nodes = live.cluster_nodes()
    report.extra["cluster nodes at the end (each announced by a MEET)"] = len(nodes) - 1
    bogus = [line for line in nodes if line.split()[0].encode() not in senders and "myself" not in line]
    if bogus:
        report.finding("membership", "%d nodes the fuzzer did not announce stay: %r" % (len(bogus), bogus[:3]))


def fuzz_live(target, count, seed, args):
    report = Report(target, "live")
    rng = random.Random(seed ^ 0x11FE)
    tmp = tempfile.mkdtemp(prefix="disque-fuzz-")
    env = dict(kv.split("=", 1) for kv in args.node_env) or None
    live = LiveNode(tmp, rng, env, args.node_set)
    pool = [bytes(rng.choice(b"0123456789abcdef") for _ in range(40)) for _ in range(4)]
    peers = FuzzPeers(pool) if target == "bus" else None
    try:
        _fuzz_live(target, count, seed, args, report, rng, live, pool, peers)
    finally:
        live.stop()
        if peers is not None:
            peers.stop()
    if report.finding_count:
        report.extra["node directory (log)"] = tmp
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def _fuzz_live(target, count, seed, args, report, rng, live, pool, peers):
    port = live.node.port + (10000 if target == "bus" else 0)
    pump = Pump("127.0.0.1", port, rng, args.concurrency, args.ping_timeout, check_replies=target == "resp")
    if target == "resp":
        pump.describe = live.client_line
    senders = set(pool)  # grows with every sender a MEET announces
    if target == "resp":
        gen = RespGen(seed)
    else:
        gen = BusGen(seed, senders=pool, live=True)
        # The senders join first (FuzzPeers answer the node's links), then
        # each bus connection says who it is first, as a peer does: job
        # messages from it reach the core.
        pump.run([peers.meet(sender) for sender in pool])
        deadline = time.monotonic() + 10
        while not all(live.is_member(sender) for sender in pool) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not all(live.is_member(sender) for sender in pool):
            report.finding("membership", "the fuzzer's senders did not join: %r" % live.cluster_nodes())
    rss = {"start": rss_kb(live.pid)}
    sent = deleted = 0
    half = count // 2
    t0 = time.perf_counter()
    batch = args.batch
    while sent < count:
        n = min(batch, count - sent, half - sent if sent < half else count)
        if target == "resp":
            items = []
            for _ in range(n):
                cat, data, _exp = gen.next()
                report.by_category[cat] += 1
                items.append((data, _resp_clean(data)))
            payloads = _connection_payloads(rng, items, args.per_conn)
        else:
            items = _bus_items(gen, rng, n, report, senders)
            payloads = []
            for p in _connection_payloads(rng, items, args.per_conn):
                payloads.append(peers.meet(rng.choice(pool)) + p)
        pump.run(payloads)
        sent += n
        if not live.alive():
            report.finding("node", "the node exited (code %s) after %d inputs" % (live.node.proc.returncode, sent))
            break
        try:
            if not live.ping(args.ping_timeout):
                report.finding("node", "PING not answered with PONG after %d inputs" % sent)
        except OSError as e:
            report.finding("node", "PING failed after %d inputs: %s" % (sent, e))
            break
        try:  # the fuzzer's own jobs go after each batch: its state stays small
            deleted += live.delete_fuzz_jobs()
        except (OSError, hiredis.ProtocolError, ValueError) as e:
            report.finding("node", "deleting the fuzzer's jobs failed: %s" % _exc(e))
        if sent == half:
            time.sleep(0.5)
            rss["half"] = rss_kb(live.pid)
        if args.progress:
            print("  live %s %d (%.0f/s) rss %d kB" % (target, sent, sent / (time.perf_counter() - t0),
                                                     rss_kb(live.pid)), file=sys.stderr)
    report.seconds = time.perf_counter() - t0
    report.extra["fuzz jobs deleted after the batches"] = deleted
    try:
        _end_checks(report, live, senders, rss)
    except (OSError, hiredis.ProtocolError, ValueError) as e:
        report.finding("node", "end checks failed: %s" % _exc(e))
    for line in live.log_problems()[:5]:
        report.finding("log", line)
    report.extra["stuck connections"] = pump.stuck
    if target == "resp":
        report.extra["replies read"] = pump.replies
    if pump.bad_replies:
        report.finding("reply", "%d connections got bytes that are not RESP, first: %s"
                       % (pump.bad_replies, pump.bad_sample))
    if pump.stuck:
        report.finding("node", "%d connections not closed within %.0f s of our half-close; first: %r"
                       % (pump.stuck, args.ping_timeout, pump.stuck_sample))
    report.extra["rss kB"] = rss
    if "half" in rss and "end" in rss:
        growth = (rss["end"] - rss["half"]) / 1024.0
        report.extra["rss growth, second half (MB)"] = round(growth, 1)
        if growth > args.rss_bound:
            report.finding("memory", "RSS grew %.1f MB in the second half (bound %d MB)" % (growth, args.rss_bound))
    return report


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("resp", "bus", "all"), default="all")
    ap.add_argument("--count", type=int, default=100_000, help="inputs per target")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--live", action="store_true", help="against a real node over sockets")
    ap.add_argument("--batch", type=int, default=20_000, help="live: inputs between two PING checks")
    ap.add_argument("--concurrency", type=int, default=32, help="live: connections open at once")
    ap.add_argument("--per-conn", type=int, default=64, help="live: at most this many inputs per connection")
    ap.add_argument("--ping-timeout", type=float, default=30.0, help="live: seconds a PING may take")
    ap.add_argument("--rss-bound", type=int, default=32, help="live: MB the RSS may grow in the second half")
    ap.add_argument("--node-env", action="append", default=[], metavar="NAME=VALUE",
                    help="live: an environment variable for the node (e.g. MALLOC_MMAP_THRESHOLD_=65536)")
    ap.add_argument("--node-set", action="append", default=[], metavar="NAME=VALUE",
                    help="live: a directive for the node (twistd disque --set), e.g. gc-freeze-interval=0")
    ap.add_argument("--no-core", action="store_true", help="bus in process: decode only, no node core")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    targets = ("resp", "bus") if args.target == "all" else (args.target,)
    reports = []
    for target in targets:
        if args.live:
            r = fuzz_live(target, args.count, args.seed, args)
        elif target == "resp":
            r = fuzz_resp(args.count, args.seed, progress=100_000 if args.progress else None)
        else:
            r = fuzz_bus(args.count, args.seed, progress=100_000 if args.progress else None, core=not args.no_core)
        print(r.summary())
        if args.json:
            print(json.dumps(r.as_dict()))
        reports.append(r)
    print("python %s, seed %d" % (sys.version.split()[0], args.seed))
    return 1 if any(r.finding_count for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
