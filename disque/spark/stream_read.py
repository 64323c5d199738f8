"""Streaming read, at least once.

Where things run: Spark keeps ONE long-lived Python process per query for
the offset methods (``initialOffset``, ``latestOffset``, ``partitions``,
``commit``); ``read`` runs in executor workers and gets everything it needs
from its :class:`StreamPartition`.  This module is the driver side (the
:class:`StreamReader`); the executor side is
:mod:`disque.spark.stream_partition`.  It stays over 400 lines: the reader
is one object implementing Spark's interface, whose methods share the
in-flight batches and their WORKING thread, and this docstring is the life
of a job across them.

The life of a job:

1. ``latestOffset(start)`` takes up to ``maxJobsPerTrigger`` jobs with
   ``GETJOB NOHANG WITHCOUNTERS`` from the nodes (rotating the first node
   asked), sends ``WORKING`` for each at once (its reply is the job's RETRY)
   and returns the offset ``{"seq": start.seq + 1, "jobs": {node: [ids]}}``.
   Spark logs it to the checkpoint before the batch runs.
2. ``partitions(start, end)`` cuts ``end``'s IDs into partitions (same
   offset, same partitions); each carries the rows kept from GETJOB, or
   only the IDs when this process did not fetch them (a restarted query
   replaying its last logged batch): ``read`` then SHOWs them by ID.
3. Until the batch is committed a daemon thread sends WORKING for its jobs
   every ``min(workingInterval, smallest RETRY / 2)`` seconds, so the
   nodes do not requeue them while the batch runs.
4. ``commit(end)`` (Spark calls it once the batch's sink has returned,
   when it plans the next batch) ACKs ``end``'s jobs, in one pipelined
   round per node (``ACKJOB``, or ``FASTACK`` with ``fastAck``).
5. With ``nackDelayMs``, ``stop()`` (the query stops, or fails) NACKs the
   jobs of every batch not committed with ``DELAY nackDelayMs``: they come
   back after that delay, counting a NACK, instead of after their RETRY.

Dead letters (``maxDeliveries``, which needs ``nackDelayMs``): a job whose
counters say it was delivered ``maxDeliveries`` times already (``nacks +
additional-deliveries >= maxDeliveries``) is not handed to Spark again.  It
is moved: ``ADDJOB <deadLetter or queue:dead> body 5000 DEDUP <job id>`` on
the node it came from, then ``ACKJOB`` there.  The check is made on the
counters of GETJOB (``_fetch``) and, for a replayed batch read by ID, on
those of SHOW (:func:`read_partition`), where every failed attempt of that
batch added a NACK.  A job that could not be moved (an error reply, a lost
connection) is delivered as usual: never lost, and tried again at its
next delivery.

Invariants:

* a job is ACKed only after a batch holding it has gone through the sink:
  a crash anywhere before leaves it unacknowledged, and it comes back
  (its RETRY requeues it, or the restarted query replays the logged batch);
* ``latestOffset`` returns a new offset when it got jobs OR when ``start``
  holds jobs this process has not committed.  That empty batch is what
  makes Spark commit (ACK) the last real batch when the queues go quiet;
  an empty batch never calls for another one, so an idle query is idle.
"""

import signal
import threading
import time
from typing import Dict, List, Tuple

from pyspark.sql.datasource import DataSourceStreamReader

from .connection import Connection, ConnectError, DisqueSparkError, ServerError, discover, refusal, split_address
from .encode import id_requests
from .offsets import initial_offset, job_count, make_offset, offset_jobs, offset_seq, pack_ids, plan_partitions
from .schema import arrow_blob, stream_row
from .stream_partition import ACK_CHUNK, StreamPartition, is_spent, move_to_dead_letters, read_partition, warn

try:  # PySpark >= 4.1
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark: no Trigger.AvailableNow support
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

try:  # PySpark >= 4.2: read limits (admission control)
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
except ImportError:  # pragma: no cover
    ReadAllAvailable = ReadMaxRows = None

GETJOB_COUNT = 10000         # most jobs asked for by one GETJOB (a batch's share takes one or a few)
ALL_AVAILABLE_CAP = 1000000  # jobs per batch when Spark asks for everything
MIN_WORKING_PERIOD_S = 0.2
NODES_REFRESH_S = 30.0


def _stop_on_sigterm():
    """Make SIGTERM run ``stop()``.  Spark ends a query's source process
    (the one running the offset methods, where the reader is made) with
    SIGTERM, which by default kills Python at once: PySpark's runner then
    never reaches its ``finally: reader.stop()``.  The handler turns the
    first SIGTERM into SystemExit, which unwinds to that ``finally``, and
    ignores the next ones so that ``stop()`` can finish its NACKs.  Done
    only in the main thread of a process whose SIGTERM is still the
    default."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        warn("SIGTERM has a handler already: jobs of an unfinished batch are left to their RETRY "
             "when the query stops")
        return

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_sigterm)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options):
        self.options = options
        self._init_state()
        if options.nack_delay_ms is not None:
            _stop_on_sigterm()

    def _init_state(self):
        self._lock = threading.Lock()
        self._nodes = None          # sorted addresses
        self._nodes_at = 0.0
        self._conns = {}            # addr -> Connection (offset-method thread only)
        self._rows = {}             # seq -> {addr: [stream rows in ID order]}, batches fetched here, not committed
        self._pending = {}          # seq -> {addr: [ids]}: batches awaiting commit
        self._postponed = {}        # seq -> monotonic time of the batch's last WORKING (or GETJOB)
        self._committed = set()     # seqs committed by this process
        self._retry_min = None      # smallest RETRY (s) among pending jobs
        self._rr = 0
        self._budget = None         # Trigger.AvailableNow: jobs left to take
        self._last = None           # (start seq, end offset) of the last new offset
        self._thread = None
        self._stop = threading.Event()

    # The reader is pickled to executors for read(): keep only the options.
    def __getstate__(self):
        return {"options": self.options}

    def __setstate__(self, state):
        self.options = state["options"]
        self._init_state()

    # -- connections -----------------------------------------------------

    def _node_list(self) -> List[str]:
        now = time.monotonic()
        if self._nodes is None or now - self._nodes_at > NODES_REFRESH_S:
            try:
                self._nodes = [addr for addr, _ in discover(self.options.nodes, self.options.password,
                                                            self.options.username)]
            except ConnectError:
                if self._nodes is None:
                    raise
            self._nodes_at = now
        return self._nodes

    def _conn(self, addr, pool) -> Connection:
        conn = pool.get(addr)
        if conn is None:
            host, port = split_address(addr)
            conn = pool[addr] = Connection(host, port, self.options.password, username=self.options.username)
        return conn

    def _drop(self, addr, pool):
        conn = pool.pop(addr, None)
        if conn is not None:
            conn.close()

    # -- offsets ---------------------------------------------------------

    def initialOffset(self):
        self._node_list()  # fail the query start early on bad nodes / password
        return initial_offset()

    def getDefaultReadLimit(self):
        if ReadMaxRows is None:  # pragma: no cover
            return super().getDefaultReadLimit()
        return ReadMaxRows(self.options.max_jobs_per_trigger)

    def prepareForTriggerAvailableNow(self):
        """Take at most the jobs queued now (sum of QLEN), so the query ends."""
        total = 0
        for addr in self._node_list():
            try:
                conn = self._conn(addr, self._conns)
                total += sum(conn.pipeline([("QLEN", q) for q in self.options.queues]))
            except ConnectError:
                self._drop(addr, self._conns)
        self._budget = total

    def _limit(self, limit) -> int:
        if limit is None or ReadMaxRows is None:
            return self.options.max_jobs_per_trigger
        if isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if isinstance(limit, ReadAllAvailable):
            return ALL_AVAILABLE_CAP
        return self.options.max_jobs_per_trigger

    def latestOffset(self, start=None, limit=None):
        if start is None:  # PySpark < 4.2 calls latestOffset() without arguments
            start = self._last[1] if self._last else initial_offset()
        seq = offset_seq(start)
        if self._last is not None and self._last[0] == seq:
            return self._last[1]  # asked again for the same start: same batch
        want = self._limit(limit)
        if self._budget is not None:
            want = min(want, self._budget)
        jobs, rows = self._fetch(want) if want > 0 else ({}, {})
        n = sum(len(v) for v in jobs.values())
        if self._budget is not None:
            self._budget -= n
        awaiting = job_count(start) > 0 and seq not in self._committed
        if not n and not awaiting:
            return start
        end = make_offset(seq + 1, jobs)
        if n:
            self._rows[seq + 1] = rows
            with self._lock:
                self._pending[seq + 1] = end["jobs"]
                self._postponed[seq + 1] = time.monotonic()
        self._last = (seq, end)
        return end

    def _fetch(self, want: int) -> Tuple[Dict[str, List[str]], Dict[str, List[tuple]]]:
        """Up to ``want`` jobs from the nodes, WORKING sent: ({addr: [ids]},
        {addr: [their stream rows, in the same order]})."""
        nodes = self._node_list()
        queues = list(self.options.queues)
        out = {}
        rows = {}
        reachable = 0
        first = self._rr % len(nodes)
        self._rr += 1
        for addr in nodes[first:] + nodes[:first]:
            if want <= 0:
                break
            got = []
            retries = []
            try:
                conn = self._conn(addr, self._conns)
                while want > 0:
                    k = min(want, GETJOB_COUNT)
                    reply = conn.call("GETJOB", "NOHANG", "COUNT", k, "WITHCOUNTERS", "FROM", *queues)
                    if not reply:
                        break
                    for item in reply:
                        got.append((item[1].decode(), item[0].decode("utf-8", "replace"), item[2],
                                    int(item[4]), int(item[6])))
                    want -= len(reply)
                    if len(reply) < k:
                        break
                reachable += 1
                if got and self.options.max_deliveries is not None:
                    got = self._drop_spent(conn, got)
                if got:
                    retries = self._working(conn, [g[0] for g in got])
            except ConnectError as e:
                # Jobs already taken stay in this batch (their RETRY requeues
                # them if it is lost); the node is skipped for now.
                warn(str(e))
                self._drop(addr, self._conns)
            except ServerError as e:
                raise refusal("GETJOB", conn, e) from None
            if got:
                retries = retries or [None] * len(got)
                rows[addr] = [stream_row(job_id, queue, body, retry, nacks, deliveries)
                              for (job_id, queue, body, nacks, deliveries), retry in zip(got, retries)]
                out[addr] = [g[0] for g in got]
        if not reachable:
            raise ConnectError("disque: no node reachable among %s" % ",".join(nodes))
        if out:
            self._ensure_heartbeat()
        return out, rows

    def _drop_spent(self, conn, got):
        """``got`` without the jobs delivered ``maxDeliveries`` times
        already, moved to their dead-letter queue (a job that could not be
        moved stays in ``got``: it is delivered as usual)."""
        limit = self.options.max_deliveries
        spent = [(g[0], g[1], g[2]) for g in got if is_spent(g[3], g[4], limit)]
        if not spent:
            return got
        out = set(move_to_dead_letters(conn, spent, self.options.dead_letter))
        return [g for g in got if g[0] not in out]

    def _working(self, conn, ids):
        """WORKING for ``ids`` on ``conn``; remember the smallest RETRY.
        Returns each job's RETRY (None where WORKING failed)."""
        replies = list(conn.stream_encoded([id_requests(b"WORKING", ids)], 512))
        out = [r if isinstance(r, int) else None for r in replies]
        retries = [r for r in out if r]
        if retries:
            with self._lock:
                low = min(retries)
                if self._retry_min is None or low < self._retry_min:
                    self._retry_min = low
        return out

    # -- heartbeat -------------------------------------------------------

    def _period(self) -> float:
        period = self.options.working_interval
        if self._retry_min:
            period = min(period, self._retry_min / 2.0)
        return max(period, MIN_WORKING_PERIOD_S)

    def _ensure_heartbeat(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeat, name="disque-working", daemon=True)
            self._thread.start()

    def _heartbeat(self):
        """Every half period, WORKING for the batches last postponed half a
        period ago or more: each pending job is postponed at least once
        per period, and a batch just fetched (GETJOB and WORKING postponed
        its jobs) is not sent WORKING again before it needs it."""
        pool = {}
        while not self._stop.wait(self._period() / 2):
            now = time.monotonic()
            due = self._period() / 2
            with self._lock:
                by_node = {}
                for seq, jobs in self._pending.items():
                    if now - self._postponed.get(seq, 0.0) < due:
                        continue
                    self._postponed[seq] = now
                    for addr, ids in jobs.items():
                        by_node.setdefault(addr, []).extend(ids)
            for addr, ids in by_node.items():
                try:
                    self._working(self._conn(addr, pool), ids)
                except DisqueSparkError:
                    self._drop(addr, pool)  # those jobs are just left: RETRY may requeue them
        for addr in list(pool):
            self._drop(addr, pool)

    # -- planning and commit ---------------------------------------------

    def partitions(self, start, end):
        seq = offset_seq(end)
        jobs = offset_jobs(end)
        if jobs and seq not in self._committed:
            with self._lock:
                if seq not in self._pending:  # a replayed batch: keep its jobs alive too
                    self._pending[seq] = jobs
                    replay = True
                else:
                    replay = False
            if replay:
                self._ensure_heartbeat()
        nodes = self._node_list()
        fetched = self._rows.get(seq) or {}
        taken = {}  # addr -> rows of its list planned so far
        parts = []
        for addr, ids in plan_partitions(end):
            first = taken.get(addr, 0)
            taken[addr] = first + len(ids)
            rows = fetched.get(addr, [])[first:first + len(ids)]
            rows = arrow_blob(rows) if [r[0] for r in rows] == ids else None
            dead = None
            if self.options.max_deliveries is not None:
                dead = (self.options.max_deliveries, self.options.dead_letter)
            parts.append(StreamPartition(addr, pack_ids(ids), rows, list(nodes), self.options.password, dead,
                                         self.options.username))
        return parts

    def read(self, partition):
        return read_partition(partition)

    def commit(self, end):
        """ACK the jobs of ``end`` and of every earlier batch still pending."""
        seq = offset_seq(end)
        with self._lock:
            batches = [self._pending.pop(s) for s in sorted(self._pending) if s <= seq]
            for s in [s for s in self._postponed if s <= seq]:
                del self._postponed[s]
            self._committed.add(seq)
        for s in [s for s in self._rows if s <= seq]:
            del self._rows[s]
        if offset_jobs(end) and not any(b == offset_jobs(end) for b in batches):
            batches.append(offset_jobs(end))
        by_node = {}
        for jobs in batches:
            for addr, ids in jobs.items():
                by_node.setdefault(addr, []).extend(ids)
        for addr, ids in by_node.items():
            self._ack(addr, ids)
        with self._lock:
            if not self._pending:
                self._retry_min = None

    def _ack(self, addr, ids):
        """ACKJOB (FASTACK with ``fastAck``) on the node the jobs came from,
        else on any other node: one pipelined round of :data:`ACK_CHUNK` IDs
        per command."""
        if not self._on_any_node(addr, ids, ("FASTACK" if self.options.fast_ack else "ACKJOB",), ()):
            warn("could not ACK %d jobs (no node reachable): they will be delivered again" % len(ids))

    def _on_any_node(self, addr, ids, head, tail) -> bool:
        """``head + ids + tail`` in chunks of :data:`ACK_CHUNK` IDs on the
        node the jobs came from, else on the first other node reachable;
        False when none was."""
        try:
            nodes = self._node_list()
        except ConnectError:
            nodes = []
        for target in [addr] + [a for a in nodes if a != addr]:
            try:
                conn = self._conn(target, self._conns)
                replies = conn.pipeline([head + tuple(ids[i:i + ACK_CHUNK]) + tail
                                         for i in range(0, len(ids), ACK_CHUNK)], 64)
            except ConnectError:
                self._drop(target, self._conns)
                continue
            errors = [r for r in replies if isinstance(r, ServerError)]
            if errors:
                warn("%s on %s: %s" % (head[0], target, errors[0]))
            return True
        return False

    def _nack_pending(self):
        """NACK ... DELAY nackDelayMs the jobs of every batch not committed."""
        with self._lock:
            batches = list(self._pending.values())
            self._pending.clear()
            self._postponed.clear()
        self._rows.clear()
        by_node = {}
        for jobs in batches:
            for addr, ids in jobs.items():
                by_node.setdefault(addr, []).extend(ids)
        delay = ("DELAY", self.options.nack_delay_ms)
        for addr, ids in by_node.items():
            ids = list(dict.fromkeys(ids))
            if not self._on_any_node(addr, ids, ("NACK",), delay):
                warn("could not NACK %d jobs (no node reachable): their RETRY requeues them" % len(ids))

    def stop(self):
        self._stop.set()
        if self.options.nack_delay_ms is not None:
            thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(10.0)  # no WORKING after the NACK
            self._nack_pending()
        for addr in list(self._conns):
            self._drop(addr, self._conns)
