"""The replay engine: how a transcript is replayed against our nodes and
each reply compared.

:class:`Replayer` starts a fresh real node (``twistd -n disque``) with the
config the original had (port, bind 127.0.0.1, dir, appendonly no,
maxmemory 8gb), learns its identities, then replays the blocks in file
order: it routes each block to its connection, runs the scenario's actions
around it, sends exactly the captured ``sent`` bytes with identities
substituted, reads the replies and classifies them (:mod:`golden.result`):
equal bytes are ``exact``, a listed difference is ``known`` (checked by its
entry of :mod:`golden.known`), a command whose reply varies is
``normalized`` (:mod:`golden.normalize`), anything else a ``MISMATCH``.
SCAN blocks are compared as a whole iteration (:mod:`golden.scan`).

The 3-node sections of cluster.md run against three more fresh nodes,
started when the first block tagged ``[A:7912]`` / ``[B:7913]`` /
``[C:7914]`` comes (``start_trio``); the transcript itself MEETs them.
"""

import os
import re
import time

from tests.support.process import NodeProcess, free_port

from .conn import READ_TIMEOUT, Conn
from .known import KNOWN_CHECKS, KNOWN_DIFFERENCES, RACES, known_key
from .normalize import command_order, pick_normalizer
from .originals import (CLUSTER_TAG, JOB_ID, JOB_ID_FULL, NODE_ID, ORIGINAL_CLUSTER, ORIGINAL_DIR,
                        ORIGINAL_MAIN_ADDR, ORIGINAL_NODE_ID, ORIGINAL_PORT, ORIGINAL_VICTIM_ADDR)
from .resp import encode, encode_command, parse_replies, split_requests
from .result import Result
from .scan import is_scan, replay_scan
from .scenario import (EXPECTED_ADJUST, PRELUDE, PROSE_ACTIONS, TIMED_TITLE, WAKE, before_action,
                       before_key_lookup, timing_floor)

SILENCE = 0.3  # seconds we wait for "nothing more within Xs" (the files say 0.5 / 1.5)


class Replayer:
    """Replays one transcript file against fresh nodes of ours.

    ``run(blocks)`` sends each block's bytes (identities substituted) on the
    connection the transcript names, reads as many replies as it shows, and
    appends one :class:`Result` per block to ``results``; the tables of
    :mod:`golden.scenario` say what happens between blocks.
    """

    def __init__(self, file, workdir):
        self.file = file
        self.workdir = str(workdir)
        self.nodes = {}
        self.conns = {}
        self.idmap = {}  # original ID -> ours
        self.anon = set()  # our IDs of jobs the transcript created off-screen
        self.results = []
        self.known_used = set()
        self.command_order = command_order()
        self.consumed = set()  # block indexes replayed as part of a SCAN group
        self.sticky = {}  # section -> connection name ("new connection" titles)
        self.node = self.start_node("main")
        self.port = self.node.port
        self.main_addr = None
        self.node_ids = {}  # original node ID -> ours
        self.ports = {}  # original cluster port -> ours (bytes)
        self.early = {}  # block index -> send time, for blocks sent ahead (DEBUG SLEEP)
        self.current = None  # the block being replayed
        self.current_node = "main"  # the node it runs on
        self.c_reset_id = None  # the original's new ID of C after CLUSTER RESET HARD
        self.leaving_job_on_b = None  # see EXPECTED_ADJUST

    # -- nodes and connections ------------------------------------------

    def start_node(self, name, wait=True):
        workdir = os.path.join(self.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        node = NodeProcess(workdir, port=self.free_port())
        config = os.path.join(workdir, "disque.conf")
        with open(config, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\nappendonly no\nmaxmemory 8gb\n" % (node.port, workdir))
        node.config = config
        node.start(wait=wait)
        self.nodes[name] = node
        return node

    def free_port(self):
        """A free port (and bus port) no node of ours has taken yet."""
        taken = {n.port for n in self.nodes.values()}
        while True:
            port = free_port()
            if port not in taken and port + 10000 not in taken:
                return port

    def start_trio(self):
        """The three nodes of the 3-node sections, fresh and not joined
        (the transcript MEETs them); their IDs and ports are learned."""
        trio = [self.start_node(name, wait=False) for name in ORIGINAL_CLUSTER]
        for node in trio:
            node.wait_ready()
        for name, (orig_port, orig_id) in ORIGINAL_CLUSTER.items():
            self.ports[orig_port] = b"%d" % self.nodes[name].port
            our_id = self.conn(name).call(b"CLUSTER", b"MYID")[1]
            assert NODE_ID.match(our_id), our_id
            self.node_ids[orig_id] = our_id

    def node_of(self, name):
        """The node a connection name belongs to ("A", "A helper", ...)."""
        if name.startswith("7915"):
            return self.nodes.get("7915") or self.start_node("7915")
        head = name.split()[0]
        if head in ORIGINAL_CLUSTER:
            if head not in self.nodes:
                self.start_trio()
            return self.nodes[head]
        return self.node

    def conn(self, name):
        c = self.conns.get(name)
        if c is None or c.eof:
            if c is not None:
                c.close()
            node = self.node_of(name)
            c = self.conns[name] = Conn(node.port)
        return c

    def our_node_id(self, name):
        """Our ID of the node ``name`` ("main", "A", "B", "C") now."""
        if name == "main":
            return self.my_id
        orig = ORIGINAL_CLUSTER[name][1]
        if name == "C" and self.c_reset_id is not None:
            orig = self.c_reset_id
        return self.node_ids[orig]

    def fresh_conn(self, name):
        old = self.conns.pop(name, None)
        if old is not None:
            old.close()
        return self.conn(name)

    def close(self):
        for c in self.conns.values():
            c.close()
        for n in self.nodes.values():
            n.stop()

    def setup_call(self, *argv, conn="main"):
        """A command the transcript implies but does not show; returns the
        reply's bytes (ADDJOB: our new job ID)."""
        value = self.conn(conn).call(*argv)
        assert value[0] in ("+", ":", "$"), (argv, value)
        return value[1]

    def note_known(self, key):
        assert key in KNOWN_DIFFERENCES, key
        self.known_used.add(key)

    # -- identities -----------------------------------------------------

    def map_ids(self, data: bytes) -> bytes:
        data = JOB_ID.sub(lambda m: self.idmap.get(m.group(0), m.group(0)), data)
        data = data.replace(ORIGINAL_NODE_ID, self.my_id)
        for orig, ours in self.node_ids.items():
            data = data.replace(orig, ours)
        return data

    def learn_node_ids(self, argv, exp, ours):
        """CLUSTER NODES: the "myself" line carries the answering node's ID;
        an original ID not seen before (C after CLUSTER RESET HARD) is
        mapped to ours."""
        if [a.upper() for a in argv[:2]] != [b"CLUSTER", b"NODES"] or exp[0] != "$" or ours[0] != "$":
            return

        def myself(text):
            for line in (text or b"").split(b"\n"):
                f = line.split(b" ")
                if len(f) > 2 and b"myself" in f[2].split(b","):
                    return f[0]
            return None

        e, o = myself(exp[1]), myself(ours[1])
        if e and o and NODE_ID.match(e) and e not in self.node_ids and e != ORIGINAL_NODE_ID \
                and o not in self.node_ids.values():
            self.node_ids[e] = o
            if self.current_node == "C":
                self.c_reset_id = e

    def learn_ids(self, exp, ours):
        """Walk the original's and our reply side by side; an original job
        ID not seen before, facing one of ours, is mapped to it."""
        if exp[0] != ours[0]:
            return
        if exp[0] == "*" and exp[1] is not None and ours[1] is not None:
            for e, o in zip(exp[1], ours[1]):
                self.learn_ids(e, o)
        elif exp[0] in ("+", "$") and exp[1] and ours[1]:
            if JOB_ID_FULL.match(exp[1]) and JOB_ID_FULL.match(ours[1]) and exp[1] not in self.idmap:
                if ours[1] not in self.idmap.values():
                    self.idmap[exp[1]] = ours[1]

    def substitute(self, value):
        """The original's reply, as our node should say it: IDs, port,
        directory and client addresses replaced."""
        kind, v = value
        if kind == "*":
            return value if v is None else ("*", [self.substitute(x) for x in v])
        if kind in ("+", "-", "$") and v is not None:
            v = self.map_ids(v)
            if v == ORIGINAL_PORT:
                v = b"%d" % self.port
            v = v.replace(ORIGINAL_DIR, self.node.workdir.encode())
            v = v.replace(b" :%s " % ORIGINAL_PORT, b" :%d " % self.port)
            if v in self.ports:  # HELLO: a node's port
                v = self.ports[v]
            for orig, ours in self.ports.items():  # CLUSTER NODES: ip:port
                v = v.replace(b"127.0.0.1:%s " % orig, b"127.0.0.1:%s " % ours)
            if self.main_addr:
                v = v.replace(ORIGINAL_MAIN_ADDR, self.main_addr)
            return (kind, v)
        return value

    def expected(self, block):
        """The original's replies as our node should send them: (values,
        bytes).  The bytes are the captured ones with IDs mapped (same
        lengths) unless a port, directory or address had to be replaced
        (or an EXPECTED_ADJUST rule applied); only then are they
        re-encoded."""
        mapped = self.map_ids(block.reply)
        values = parse_replies(mapped)
        subst = [self.substitute(v) for v in values]
        adjust = before_key_lookup(EXPECTED_ADJUST, block)
        if adjust is not None:
            subst = adjust[1](self, subst)
        if subst == values:
            return values, mapped
        return subst, b"".join(encode(v) for v in subst)

    def map_sent(self, block):
        data = self.map_ids(block.sent)
        if block.tag and CLUSTER_TAG.match(block.tag):
            self.node_of(block.tag[0])  # the trio, started on first use
            argv = split_requests(data)
            if any(a in self.ports for x in argv for a in x):  # CLUSTER MEET 127.0.0.1 <port>
                assert len(argv) == 1, block.label
                data = encode_command([self.ports.get(a, a) for a in argv[0]])
        if ORIGINAL_VICTIM_ADDR in data and "victim" in self.conns:
            argv = split_requests(data)
            assert len(argv) == 1, block.label
            data = encode_command([a.replace(ORIGINAL_VICTIM_ADDR, self.conns["victim"].addr) for a in argv[0]])
        return data

    # -- routing --------------------------------------------------------

    def conn_name(self, block):
        """Which connection a block runs on, as the transcript says."""
        if block.tag == "7915":
            return "7915"
        if block.tag == "monitor conn" or "on monitor conn" in block.command:
            return "monitor"
        if block.tag is not None and CLUSTER_TAG.match(block.tag):
            return block.tag[0]
        if block.tag is not None:
            raise AssertionError("%s: no connection for tag %r" % (block.label, block.tag))
        if "(on the killed connection)" in block.command:
            return "victim"
        if "(separate connection)" in block.subsection:
            return "separate: " + block.subsection
        if "each on a fresh connection" in block.section:
            self.fresh_conn("fresh")
            return "fresh"
        if block.title and "new connection" in block.title:
            name = "new: " + block.section
            self.fresh_conn(name)
            self.sticky[block.section] = name
            return name
        return self.sticky.get(block.section, "main")

    # -- replay ---------------------------------------------------------

    def start(self):
        main = self.conn("main")
        self.main_addr = main.addr
        self.my_id = main.call(b"CLUSTER", b"MYID")[1]
        assert re.fullmatch(rb"[0-9a-f]{40}", self.my_id), self.my_id
        prelude = PRELUDE.get(self.file)
        if prelude:
            prelude(self)

    def run(self, blocks):
        self.blocks = blocks
        self.start()
        for block in blocks:
            self.current = block
            for line in block.prose:
                action = PROSE_ACTIONS.get(line)
                if action is None:
                    self.results.append(Result(block, "MISMATCH", "no action for prose line %r" % line))
                    continue
                ids = action(self)
                if ids:
                    self.anon.update(ids)
            if block.index in self.consumed:
                continue
            before = before_action(block)
            if before:
                before[1](self)
            elif block.title and TIMED_TITLE.search(block.title) and (block.file, block.title) not in WAKE:
                self.results.append(Result(block, "MISMATCH", "the title names a delay; no BEFORE entry"))
                continue
            if block.subsection == "CLIENT KILL of another connection" and "victim" not in self.conns:
                # The victim must be registered by the server before the
                # KILL: one round trip.
                self.conn("victim").call(b"PING")
            self.replay(block)

    def send_early(self, block, conn_name):
        """Send ``block`` now on ``conn_name``; it is read when its turn
        comes (its reply then arrives as the transcript shows)."""
        self.conn(conn_name).send(self.map_sent(block))
        self.early[block.index] = (conn_name, time.monotonic())

    def replay(self, block):
        name = self.conn_name(block)
        conn = self.conn(name)
        self.current_node = name if name in ORIGINAL_CLUSTER else "main"
        sent = self.map_sent(block)
        argvs = split_requests(sent) if not block.sent_truncated else []
        busy = [i for i, (n, _) in self.early.items() if n == name and i != block.index]
        if busy:
            self.results.append(Result(block, "MISMATCH", "the connection still waits for the reply of %s" % (
                self.blocks[busy[0]].label), sent=sent))
            return
        if is_scan(block, argvs):
            return replay_scan(self, block, conn, argvs[0])
        wake = WAKE.get((block.file, block.title))
        problems = []
        early = block.index in self.early
        if early:  # sent ahead by a BEFORE action
            _, t0 = self.early.pop(block.index)
        else:
            t0 = time.monotonic()
            conn.send(sent)
        if wake is not None:
            early = conn.silence(wake[0], keep=True)
            if early:
                problems.append("replied before the other client acted: %r" % early)
            helper = self.conn("helper")
            helper.send(b"".join(encode_command(a) for a in wake[1]))
        n = block.n_replies
        raw, values, problem = conn.read_replies(n)
        elapsed = time.monotonic() - t0
        if wake is not None:
            _, hv, hp = self.conn("helper").read_replies(len(wake[1]))
            if hp or any(v[0] != "+" for v in hv):
                problems.append("the other client's ADDJOBs failed: %r" % (hv,))
            for v in hv:
                self.anon.add(v[1])
        if problem == "timeout":
            problems.append("no complete reply within %.0fs" % READ_TIMEOUT)
            self.conns.pop(name).close()  # a late reply must not leak into the next block
        elif problem == "closed" and not (block.closed_by_server and len(values) == n):
            problems.append("connection closed by server")
        elif problem == "malformed":
            problems.append("malformed reply")
        floor = timing_floor(block, argvs[0] if argvs else [], wake)
        if early and argvs and argvs[0][:2] == [b"DEBUG", b"SLEEP"]:
            floor = float(argvs[0][2]) * 0.9  # read when the node woke up
        if not problem and elapsed < floor:
            problems.append("reply after %.2fs, expected the client blocked >= %.2fs" % (elapsed, floor))
        if not problem and block.nothing_more_within is not None:
            extra = conn.silence(SILENCE)
            if extra or conn.eof:
                problems.append("expected nothing more within %.1fs, connection open; got %r%s" % (
                    SILENCE, extra, " and EOF" if conn.eof else ""))
                raw += extra
        if not problem and block.closed_by_server:
            if not conn.wait_closed():
                problems.append("connection not closed by server")
            elif conn.buf:
                problems.append("bytes after the last reply: %r" % conn.buf)
        if block.tag == "7915" and argvs and argvs[0][0].upper() == b"SHUTDOWN":
            try:
                self.nodes["7915"].proc.wait(10)
            except Exception:
                problems.append("SHUTDOWN: the spare node's process did not exit")
        self.compare(block, sent, raw, values, argvs, problems)

    def compare(self, block, sent, raw, values, argvs, problems):
        for i, (e, o) in enumerate(zip(parse_replies(block.reply), values)):
            self.learn_ids(e, o)
            if i < len(argvs):
                self.learn_node_ids(argvs[i], e, o)
        exp_values, expected = self.expected(block)
        key = known_key(block)
        if problems or len(values) != len(exp_values):
            if not problems:
                problems.append("%d replies, expected %d" % (len(values), len(exp_values)))
            status = "MISMATCH"
        elif raw == expected and key in RACES:
            status = "exact"  # the race went the original's way this time
        elif raw == expected and key is not None:
            problems.append("listed in KNOWN_DIFFERENCES (%s) but matches the original" % key)
            status = "MISMATCH"
        elif raw == expected:
            status = "exact"
        elif key is not None:
            self.known_used.add(key)
            check = KNOWN_CHECKS.get(key)
            status = "known"
            if check is not None:
                for e, o in zip(exp_values, values):
                    problems += check(e, o, self)
                if problems:
                    status = "MISMATCH"
        else:
            status = "normalized"
            for i, (e, o) in enumerate(zip(exp_values, values)):
                if e == o:
                    continue
                argv = argvs[i] if i < len(argvs) else (argvs[0] if argvs else [])
                norm = pick_normalizer(argv, block)
                if norm is None or e[0] == "-":  # errors are never normalized
                    problems.append("differs")
                else:
                    problems += norm(e, o, self)
            if problems:
                status = "MISMATCH"
        self.results.append(Result(block, status, "; ".join(problems), expected, raw, sent))
