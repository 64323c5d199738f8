"""Executing the core's effects, and output batched per turn.

The core returns effects (``disque.core.effects``); :class:`Effects`
executes them in order (``drain``) and decides when what the connections
kept leaves (``end_batch``, ``end_turn``).  Connections keep their output
(:class:`disque.io.batch_output.BatchOutput`) and join ``pending_output``;
at the end of each batch -- or, with ``output-flush turn``, once per
reactor turn and every ``MAX_TURN_MS`` within a long one -- the AOF is
written first, then every kept output leaves, one write per connection.

Invariants: no reply or bus frame leaves before the records of its turn are
as durable as ``appendfsync`` promises; a connection with kept output is in
``pending_output`` or in ``held_output``, exactly once; a bus message is
encoded once per drain round and bus version, however many receivers; the
REPLJOBs and GOTJOBs of one turn to a peer that reads bus version 5 leave
as REPLJOBS and GOTJOBS, in their place among that peer's messages (before
any other message to it, before any link changes, and at the turn's end).
This is the request path: keep it cheap (docs/benchmarks.md).
"""

from ..core.effects import execute
from ..core.messages import GotJob, GotJobs, ReplJob
from ..io.log_limit import LogLimit
from ..io.logs import logger

log = logger("disque")

#: With ``output-flush turn``, output kept for this long (ms) in one reactor
#: turn leaves without waiting for the turn's end: a turn that serves many
#: pipelined clients must not hold back the replicas' and clients' work.
#: (1 ms cost a CPython node replicating every job 18% more CPU per job than
#: 5 ms, with no gain in latency: docs/benchmarks.md.)
MAX_TURN_MS = 5

#: The most REPLJOBs or GOTJOBs one REPLJOBS or GOTJOBS frame carries (the
#: wire's ``ids`` count is a u16), and about the most job body bytes of one
#: REPLJOBS (a longer run starts another frame).
MAX_BATCH = 4096
MAX_BATCH_BYTES = 1024 * 1024


class Effects:
    """The effect executor (the ``on_*`` methods ``execute`` calls) and the
    output batching of one :class:`disque.node.runtime.NodeRuntime`."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.node = runtime.node
        self.persistence = runtime.persistence
        self.reactor = runtime.reactor
        self.bus = runtime.bus  # the version choice of bus frames (BusHub.frame)
        self.pending_output = []  # connections with output kept until the batch ends (disque.io.batch_output)
        # Connections whose output waits for the AOF (end_turn): they got
        # output in a turn whose records the AOF could not write.  Their
        # later output queues behind (order), and all of it leaves once
        # the records are durable.
        self.held_output = []
        self.persisted = False  # this turn gave the persistence records
        # output-flush turn: output leaves once per reactor turn instead of
        # once per read.  The reactor's before_sleep (disque.node.reactor)
        # runs once every socket ready in this turn had its data, so the
        # replies and bus frames of all of them leave together (one write
        # per connection per turn), as the original's event loop does.  On
        # another reactor a delayed call of 0 s does it (on a test's Clock,
        # when the test advances time).
        self.flush_per_turn = False
        self._before_sleep = getattr(self.reactor, "before_sleep", None)
        self._turn = None  # the pending end of turn: True (before_sleep) or the delayed call
        self._turn_started = 0  # node time of the turn's first batch (or last early flush)
        self.notice_limit = LogLimit(runtime.reactor.seconds)  # the core's notices with a key: a line a minute per key
        # node id -> [ReplJob or GotJob, ...]: the REPLJOBs and GOTJOBs of
        # this turn for a peer that reads bus version 5, sent at the turn's
        # end as REPLJOBS and GOTJOBS (disque.bus.wire), or before anything
        # else is sent to that peer or a link changes.
        self._batched = {}

    def drain(self):
        """Execute the core's effects, and those they cause, in order."""
        outbox = self.node.outbox  # shared with node.cluster: never rebound
        bus = self.bus
        while outbox:
            effects = outbox[:]
            outbox.clear()
            bus.new_round()  # one encoding per message, however many receivers
            execute(effects, self)

    # The effect executor (disque.core.effects.execute).

    def on_reply(self, effect):
        effect.client.conn.deliver(effect.payload)

    def on_persist(self, effect):
        self.persistence.append(effect.record)
        self.persisted = True

    def on_send(self, effect):
        links = self.runtime.links
        if links is not None:
            msg, node_id = effect.message, effect.node_id
            batched = self._batched
            kind = type(msg)
            if (kind is ReplJob or kind is GotJob) and self.bus.reads_batches(node_id):
                kept = batched.get(node_id)
                if kept is None:
                    batched[node_id] = [msg]
                else:
                    kept.append(msg)
                return
            if node_id in batched:  # what was kept for it goes first
                self._send_batched(node_id)
            frame = self.bus.frame(msg, node_id)
            if frame is not None:
                links.send(node_id, frame)

    def _send_batched(self, only=None):
        """Send the REPLJOBs and GOTJOBs kept for peer ``only`` (every
        peer: None), in order: each run of one kind as one REPLJOBS or
        GOTJOBS frame (at most ``MAX_BATCH`` messages and about
        ``MAX_BATCH_BYTES``), a run of one as itself."""
        links = self.runtime.links
        batched = self._batched
        bus = self.bus
        records = {}  # id(REPLJOB) -> (it, its encoded record): once for every replica
        for node_id in [only] if only is not None else list(batched):
            kept = batched.pop(node_id)
            i, n = 0, len(kept)
            while i < n:
                kind = type(kept[i])
                j = i + 1
                size = len(kept[i].job.body) if kind is ReplJob else 0
                while j < n and type(kept[j]) is kind and j - i < MAX_BATCH and size < MAX_BATCH_BYTES:
                    if kind is ReplJob:
                        size += len(kept[j].job.body)
                    j += 1
                if j - i == 1:
                    frame = bus.frame(kept[i], node_id)  # (kept alive: its cached frame is its own)
                elif kind is GotJob:
                    frame = bus.frame(GotJobs(tuple([m.job_id for m in kept[i:j]])), node_id, cached=False)
                else:
                    frame = bus.repljobs_frame(kept[i:j], records)
                i = j
                if frame is not None and links is not None:
                    links.send(node_id, frame)

    def on_send_link(self, effect):
        if self._batched:
            self._send_batched()
        effect.link.send_frame(self.bus.frame(effect.message, getattr(effect.link, "node_id", None)))

    def on_link(self, effect):
        if self._batched:
            self._send_batched()
        links = self.runtime.links
        if links is not None:
            links.ensure(effect.node_id, effect.host, effect.port)

    def on_unlink(self, effect):
        if self._batched:
            self._send_batched()
        links = self.runtime.links
        if links is not None:
            links.drop(effect.node_id)

    def on_notice(self, effect):
        if effect.key is None:
            log.info("{text}", text=effect.text)
            return
        folded = self.notice_limit.admit(effect.key)
        if folded is not None:
            log.info("{text}{more}", text=effect.text,
                     more=" (%d more like it not logged in the last minute)" % folded if folded else "")

    def on_rekey(self, effect):
        if self._batched:
            self._send_batched()
        links = self.runtime.links
        if links is not None:
            links.rekey(effect.old, effect.new)

    # Output, per batch or per turn.

    def end_batch(self):
        """A batch is done: with ``output-flush batch`` what it kept leaves
        now, with ``turn`` at the turn's end (or now, in a long turn)."""
        if not self.flush_per_turn:
            self.end_turn()
        elif self._turn is None:
            self._turn_started = self.node.now
            if self._before_sleep is not None:
                self._turn = True
                self._before_sleep(self._turn_ends)
            else:
                self._turn = self.reactor.callLater(0, self.end_turn_now)
        elif self.node.now - self._turn_started >= MAX_TURN_MS:
            self._turn_started = self.node.now  # a long turn: what is ready leaves now
            self.end_turn()

    def _turn_ends(self):
        """The reactor is about to wait (before_sleep): unless the turn
        was ended already (end_turn_now), its output leaves."""
        if self._turn is True:
            self._turn = None
            self.end_turn()

    def end_turn_now(self):
        """The reactor turn ends (the delayed call), or must end at once (a
        stopping service: the pending call is cancelled, what it would have
        sent leaves now)."""
        turn, self._turn = self._turn, None
        if turn is not None and turn is not True and turn.active():
            turn.cancel()
        self.end_turn()

    def end_turn(self):
        """Write the AOF, then send what every connection kept (at the end
        of each batch, or with ``output-flush turn`` once per reactor turn
        and every ``MAX_TURN_MS`` within a long one).

        No reply or bus frame leaves before the records of its turn are as
        durable as ``appendfsync`` promises: when the AOF cannot take them
        (a full disk, a failed fsync), the turn's output is held, with all
        that follows on the same connections, until a later flush (every
        tick retries) gets them on disk.  Turns that gave the AOF nothing
        (the -MISCONF replies, reads) still answer."""
        if self._batched:  # into the links' output, which leaves below
            self._send_batched()
        durable = self.persistence.flush() is not False
        persisted, self.persisted = self.persisted, False
        if durable:
            if self.held_output:
                for conn in self.held_output:
                    conn.release()
                self.pending_output[:0] = self.held_output
                self.held_output = []
        elif persisted and self.pending_output:
            for conn in self.pending_output:
                conn.hold()
            self.held_output += self.pending_output
            self.pending_output = []
        if self.pending_output:  # after the AOF: no reply before what it acknowledges
            self.flush_output()
        runtime = self.runtime
        if runtime.counting_clients:
            if self.held_output:  # (what a held connection gets meanwhile stays)
                runtime.client_memory.report_all(self.held_output)
            runtime.client_memory.check()

    def flush_output(self):
        """Send what every connection wrote in this batch (disque.io.batch_output)."""
        pending = self.pending_output
        self.pending_output = []
        for conn in pending:
            conn.flush()
        if self.runtime.counting_clients:  # their output left, or waits for their transport
            self.runtime.client_memory.report_all(pending)
