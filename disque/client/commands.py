"""Every Disque command once: its arguments and the shape of its reply.

A method of :class:`Commands` builds a :class:`Call` (the argument list, the
reply parser, whether the node may hold the reply back, which node should
run it) and hands it to ``self._run``.  The Twisted client's ``_run``
returns a Deferred, the blocking client's the value itself; neither knows
any command, so an argument or a reply is decoded in one place only: the
arguments here, the replies in :mod:`~disque.client.replies`.

Conventions of the API: job IDs and queue names are ``str`` (``bytes``
accepted), bodies ``bytes`` (``str`` is UTF-8 encoded); wherever a job ID is
taken, a :class:`~disque.client.job.Job` is taken too, and its commands go
first to the node that delivered it.
"""

from typing import Callable, Iterable, Optional, Sequence, Tuple

# The node's ranges of the options (disque.core.limits), checked before a
# call is sent.
from ..core.limits import MAX_BACKOFF_MS, MAX_DELIVERIES, MAX_NACK_DELAY_MS, PRIORITY_MAX, PRIORITY_MIN
from .job import Job
from .replies import (int_reply, ok_reply, pairs, pairs_reply, parse_hello, parse_info, parse_jobs, qlimit_reply, raw,
                      scan_page, text, text_list_reply, text_reply)


class Call:
    """One command to run.

    ``args`` is the command line; ``parse(reply, node_id)`` shapes the
    reply (``node_id`` is the node that answered).  ``blocking`` calls may
    be held by the node for as long as it has nothing to give (GETJOB
    without NOHANG): they get a connection of their own so other calls are
    not queued behind them.  ``prefer`` is the ID of the node to try first (the node that
    delivered a job); ``pin`` a node that must run the call, with no
    failover (the pages of one scan cursor)."""

    __slots__ = ("args", "parse", "blocking", "prefer", "pin")

    def __init__(self, args: Sequence, parse: Callable = None, blocking: bool = False,
                 prefer: Optional[str] = None, pin: Optional[str] = None):
        self.args = args
        self.parse = parse or raw
        self.blocking = blocking
        self.prefer = prefer
        self.pin = pin

    def reply_timeout(self, reply_timeout: float) -> Optional[float]:
        """Seconds to wait for the reply before the node counts as failed:
        ``reply_timeout``, plus the wait a blocking call asked for (GETJOB
        TIMEOUT); ``None`` (no limit) for a GETJOB that may wait forever."""
        if not self.blocking:
            return reply_timeout
        args = self.args
        if "TIMEOUT" in args:
            ms = int(args[args.index("TIMEOUT") + 1])
            if ms > 0:
                return ms / 1000.0 + reply_timeout
        return None

    def __repr__(self):
        return "Call(%r)" % (self.args,)


def job_arg(job) -> Tuple[str, Optional[str]]:
    """A job ID argument and the node to prefer for it."""
    if isinstance(job, Job):
        return job.id, job.node
    return text(job), None


def _jobs_args(jobs) -> Tuple[list, Optional[str]]:
    if not jobs:
        raise TypeError("at least one job or job ID is needed")
    ids, prefer = [], None
    for job in jobs:
        job_id, node = job_arg(job)
        ids.append(job_id)
        prefer = prefer or node
    return ids, prefer


def _opt(args: list, name: str, value):
    if value is not None:
        args += (name, value)


def _ranged(name: str, value, low: int, high: int) -> int:
    """``value`` as an ``int`` within ``low..high``: TypeError for what is
    not an integer (``bool`` included), ValueError out of range."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            as_int = int(value)
        except (TypeError, ValueError):
            as_int = None
        if isinstance(value, bool) or as_int is None or as_int != value:
            raise TypeError("%s must be an integer, got %r" % (name, value))
        value = as_int
    if not low <= value <= high:
        raise ValueError("%s must be between %d and %d, got %d" % (name, low, high, value))
    return value


def _job_options(args: list, replicate, delay, retry, ttl, maxlen) -> None:
    """ADDJOB's original options (SCHEDULE ADD's too) onto ``args``."""
    _opt(args, "REPLICATE", replicate)
    _opt(args, "DELAY", delay)
    _opt(args, "RETRY", retry)
    _opt(args, "TTL", ttl)
    _opt(args, "MAXLEN", maxlen)


def _extension_options(args: list, queue, priority, backoff, max_deliveries, deadletter) -> None:
    """ADDJOB's extensions (SCHEDULE ADD's too) onto ``args``, checked first."""
    if priority is not None:
        args += ("PRIORITY", _ranged("priority", priority, PRIORITY_MIN, PRIORITY_MAX))
    if backoff is not None:
        args += backoff_args(backoff)
    if max_deliveries is not None:
        args += ("MAXDELIVERIES", _ranged("max_deliveries", max_deliveries, 1, MAX_DELIVERIES))
    if deadletter is not None:
        if not deadletter or text(deadletter) == text(queue):
            raise ValueError("deadletter must name a queue other than the job's own, got %r" % (deadletter,))
        args += ("DEADLETTER", deadletter)


def backoff_args(backoff) -> list:
    """ADDJOB's BACKOFF arguments: an ``int`` of ms is ``BACKOFF FIXED ms``,
    a ``(base_ms, max_ms)`` pair ``BACKOFF EXP base max`` (the delay
    doubles with each NACK from ``base`` up to ``max``)."""
    if isinstance(backoff, (tuple, list)):
        if len(backoff) != 2:
            raise TypeError("backoff is ms (FIXED) or a (base_ms, max_ms) pair (EXP), got %r" % (backoff,))
        base = _ranged("backoff base", backoff[0], 1, MAX_BACKOFF_MS)
        cap = _ranged("backoff max", backoff[1], 1, MAX_BACKOFF_MS)
        if cap < base:
            raise ValueError("backoff max (%d ms) is below its base (%d ms)" % (cap, base))
        return ["BACKOFF", "EXP", base, cap]
    return ["BACKOFF", "FIXED", _ranged("backoff", backoff, 1, MAX_BACKOFF_MS)]


class Commands:
    """The Disque command set, shared by the clients (mixin: the class that
    uses it defines ``_run(call)``)."""

    def _run(self, call: Call):
        raise NotImplementedError

    def execute(self, *args, blocking: bool = False):
        """Any command line, its reply as the wire gives it."""
        return self._run(Call(args, blocking=blocking))

    # -- Jobs --------------------------------------------------------------------

    def add_job(self, queue, body, timeout: int = 0, replicate: Optional[int] = None,
                delay: Optional[int] = None, retry: Optional[int] = None, ttl: Optional[int] = None,
                maxlen: Optional[int] = None, async_: bool = False, dedup=None,
                priority: Optional[int] = None, backoff=None, max_deliveries: Optional[int] = None,
                deadletter=None):
        """ADDJOB: add ``body`` to ``queue``; the new job's ID.

        ``timeout`` is ADDJOB's ms-timeout (milliseconds to wait for the
        copies; 0 waits as long as it takes).  ``replicate``, ``delay``,
        ``retry``, ``ttl`` (seconds), ``maxlen`` and ``async_`` are ADDJOB's
        options; ``dedup`` is this node's DEDUP key (docs/dedup.md), which
        also makes a retry after a lost reply add nothing twice.

        The extensions (docs/extensions.md): ``priority`` 1 (lowest) to 9
        (the node's default is 5); ``backoff``, how long a NACK without a
        delay of its own keeps the job out of its queue: milliseconds
        (``BACKOFF FIXED``) or a ``(base_ms, max_ms)`` pair (``BACKOFF
        EXP``: doubled per NACK up to ``max_ms``); ``max_deliveries``, the
        deliveries after which the job goes to its dead-letter queue
        (``deadletter``, default ``<queue>:dead``).  Out-of-range values
        raise ValueError before anything is sent.  Raises NoReplication,
        Paused, MaxLen, OutOfMemory."""
        args = ["ADDJOB", queue, body, int(timeout)]
        _job_options(args, replicate, delay, retry, ttl, maxlen)
        if async_:
            args.append("ASYNC")
        _opt(args, "DEDUP", dedup)
        _extension_options(args, queue, priority, backoff, max_deliveries, deadletter)
        return self._run(Call(args, text_reply))

    def get_jobs(self, *queues, count: int = 1, timeout: Optional[int] = None,
                 nohang: bool = False, with_counters: bool = True):
        """GETJOB: up to ``count`` jobs from the first of ``queues`` that has
        some, as a list of :class:`Job` (empty when ``timeout`` milliseconds
        passed, or at once with ``nohang``).  Without ``timeout`` and
        ``nohang`` it waits until a job comes, as GETJOB does."""
        if not queues:
            raise TypeError("get_jobs needs at least one queue")
        args = ["GETJOB"]
        if nohang:
            args.append("NOHANG")
        _opt(args, "TIMEOUT", timeout)
        if count != 1:
            args += ("COUNT", count)
        if with_counters:
            args.append("WITHCOUNTERS")
        args.append("FROM")
        args.extend(queues)
        return self._run(Call(args, parse_jobs, blocking=not nohang))

    def get_job(self, *queues, timeout: Optional[int] = None, nohang: bool = False):
        """One job or ``None``: :meth:`get_jobs` with ``count=1``."""
        return self._then(self.get_jobs(*queues, timeout=timeout, nohang=nohang),
                          lambda jobs: jobs[0] if jobs else None)

    def ack(self, *jobs):
        """ACKJOB: the number of jobs the node knew and acknowledged."""
        ids, prefer = _jobs_args(jobs)
        return self._run(Call(["ACKJOB"] + ids, int_reply, prefer=prefer))

    def fast_ack(self, *jobs):
        """FASTACK: best-effort acknowledgement; the number of known jobs."""
        ids, prefer = _jobs_args(jobs)
        return self._run(Call(["FASTACK"] + ids, int_reply, prefer=prefer))

    def nack(self, *jobs, delay: Optional[int] = None):
        """NACK: queue the jobs again, counting a nack; the number of jobs
        the node knew.  At once, or after the job's BACKOFF if it was added
        with one; ``delay`` (milliseconds, ``NACK ... DELAY``, an extension)
        sets the wait instead."""
        ids, prefer = _jobs_args(jobs)
        args = ["NACK"] + ids
        if delay is not None:
            args += ("DELAY", _ranged("delay", delay, 0, MAX_NACK_DELAY_MS))
        return self._run(Call(args, int_reply, prefer=prefer))

    def working(self, job):
        """WORKING: postpone the job's next delivery; the job's RETRY in
        seconds (0: the job is never delivered again).  Raises NoJob,
        TooLate."""
        job_id, prefer = job_arg(job)
        return self._run(Call(["WORKING", job_id], int_reply, prefer=prefer))

    def show(self, job):
        """SHOW: the job's fields as a dict (``None`` if the node does not
        know it).  Numbers are ``int``, the body ``bytes``."""
        job_id, prefer = job_arg(job)
        return self._run(Call(["SHOW", job_id], pairs_reply, prefer=prefer))

    def enqueue(self, *jobs):
        """ENQUEUE: queue the jobs again, counting an additional delivery."""
        ids, prefer = _jobs_args(jobs)
        return self._run(Call(["ENQUEUE"] + ids, int_reply, prefer=prefer))

    def revive(self, *jobs):
        """REVIVE (an extension): each dead letter back in the queue it came
        from as a new job; a list of the new IDs, ``None`` for a job that is
        no dead letter on the node."""
        ids, prefer = _jobs_args(jobs)
        return self._run(Call(["REVIVE"] + ids, text_list_reply, prefer=prefer))

    def dequeue(self, *jobs):
        """DEQUEUE: take the jobs out of their queue (they stay known)."""
        ids, prefer = _jobs_args(jobs)
        return self._run(Call(["DEQUEUE"] + ids, int_reply, prefer=prefer))

    def del_job(self, *jobs):
        """DELJOB: forget the jobs on this node only."""
        ids, prefer = _jobs_args(jobs)
        return self._run(Call(["DELJOB"] + ids, int_reply, prefer=prefer))

    # -- Schedules (an extension: docs/extensions.md) -----------------------------

    def schedule_add(self, name, queue, body, cron: Optional[str] = None, tz: Optional[str] = None,
                     every_ms: Optional[int] = None, catchup: Optional[str] = None,
                     replicate: Optional[int] = None, delay: Optional[int] = None, retry: Optional[int] = None,
                     ttl: Optional[int] = None, maxlen: Optional[int] = None, priority: Optional[int] = None,
                     backoff=None, max_deliveries: Optional[int] = None, deadletter=None):
        """SCHEDULE ADD: every node adds a job of ``body`` to ``queue`` at
        each run, once per run: at the times of ``cron`` (5 fields, or 6
        with seconds first) in the zone ``tz``, or every ``every_ms``
        milliseconds; ``catchup`` ("skip", "one" or "all") says what runs
        missed while the whole cluster was down become.  The other options
        are :meth:`add_job`'s.  Replaces a schedule of the same name."""
        if (cron is None) == (every_ms is None):
            raise ValueError("schedule_add needs cron or every_ms, not both")
        if tz is not None and cron is None:
            raise ValueError("tz goes with cron")
        if catchup not in (None, "skip", "one", "all"):
            raise ValueError("catchup must be skip, one or all, got %r" % (catchup,))
        args = ["SCHEDULE", "ADD", name, queue, body]
        if cron is not None:
            args += ("CRON", cron)
            _opt(args, "TZ", tz)
        else:
            args += ("EVERY", int(every_ms))
        _opt(args, "CATCHUP", catchup)
        _job_options(args, replicate, delay, retry, ttl, maxlen)
        _extension_options(args, queue, priority, backoff, max_deliveries, deadletter)
        return self._run(Call(args, text_reply))

    def schedule_del(self, name):
        """SCHEDULE DEL: 1 if the schedule existed, else 0."""
        return self._run(Call(["SCHEDULE", "DEL", name], int_reply))

    def schedule_pause(self, name):
        """SCHEDULE PAUSE: no run until :meth:`schedule_resume`."""
        return self._run(Call(["SCHEDULE", "PAUSE", name], text_reply))

    def schedule_resume(self, name):
        """SCHEDULE RESUME: runs go on (those due while paused are not owed)."""
        return self._run(Call(["SCHEDULE", "RESUME", name], text_reply))

    def schedules(self):
        """SCHEDULE LIST: the names of the schedules."""
        return self._run(Call(["SCHEDULE", "LIST"], text_list_reply))

    def schedule_show(self, name, next: Optional[int] = None):
        """SCHEDULE SHOW: the schedule's fields as a dict (``next``: the
        times of the next runs, ms, 3 unless ``next`` says)."""
        args = ["SCHEDULE", "SHOW", name]
        if next is not None:
            args += ("NEXT", int(next))
        return self._run(Call(args, pairs_reply))

    # -- Queues ------------------------------------------------------------------

    def qlen(self, queue):
        """QLEN: the queue's length on the node."""
        return self._run(Call(["QLEN", queue], int_reply))

    def qstat(self, queue):
        """QSTAT: the queue's fields as a dict (``None`` for an unknown queue)."""
        return self._run(Call(["QSTAT", queue], pairs_reply))

    def qpeek(self, queue, count: int = 1):
        """QPEEK: up to ``count`` jobs without taking them (negative: the
        newest first), as :class:`Job` (no counters)."""
        return self._run(Call(["QPEEK", queue, int(count)], parse_jobs))

    def pause(self, queue, *options):
        """PAUSE: options among ``in``, ``out``, ``all``, ``none``, ``state``,
        ``bcast``; the queue's pause state afterwards (``"none"``...)."""
        if not options:
            raise TypeError("pause needs at least one option (in, out, all, none, state, bcast)")
        return self._run(Call(["PAUSE", queue] + list(options), text_reply))

    def qlimit(self, queue):
        """QLIMIT queue (an extension): the queue's limits and this node's
        part of them as a dict (``rate``, ``burst``, ``concurrency``,
        ``rate-here``, ``concurrency-here``, ``in-flight``, ``held``; rates
        as ``float``, 0 for no limit); ``{}`` for a queue without limits."""
        return self._run(Call(["QLIMIT", queue], qlimit_reply))

    def set_qlimit(self, queue, rate=None, burst: Optional[int] = None, concurrency: Optional[int] = None):
        """QLIMIT queue RATE r [BURST b] [CONCURRENCY c] (an extension):
        set the queue's limits cluster-wide, replacing the ones it had.
        ``rate``: deliveries per second (an ``int``, or a ``float``
        rounded to 3 decimals); ``burst`` needs ``rate``.  True once set."""
        if rate is None and concurrency is None:
            raise TypeError("set_qlimit needs rate or concurrency (clear_qlimit removes the limits)")
        if burst is not None and rate is None:
            raise TypeError("burst needs rate")
        args = ["QLIMIT", queue]
        if rate is not None:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.001 <= rate <= 1_000_000:
                raise ValueError("rate must be a number of deliveries per second from 0.001 to 1000000, got %r"
                                 % (rate,))
            args += ("RATE", ("%.3f" % rate).rstrip("0").rstrip("."))
        if burst is not None:
            args += ("BURST", _ranged("burst", burst, 1, (1 << 31) - 1))
        if concurrency is not None:
            args += ("CONCURRENCY", _ranged("concurrency", concurrency, 1, (1 << 31) - 1))
        return self._run(Call(args, ok_reply))

    def clear_qlimit(self, queue):
        """QLIMIT queue NONE (an extension): remove the queue's limits,
        cluster-wide.  True once done."""
        return self._run(Call(["QLIMIT", queue, "NONE"], ok_reply))

    # -- Scans (one page; the clients iterate) -------------------------------------

    def qscan_page(self, cursor: int = 0, count: Optional[int] = None, busyloop: bool = False,
                   minlen: Optional[int] = None, maxlen: Optional[int] = None,
                   importrate: Optional[int] = None, node: Optional[str] = None):
        """One QSCAN page: a :class:`Page` of queue names.  ``node`` pins
        the call to the node of an earlier page (``Page.node``)."""
        args = ["QSCAN", int(cursor)]
        _opt(args, "COUNT", count)
        if busyloop:
            args.append("BUSYLOOP")
        _opt(args, "MINLEN", minlen)
        _opt(args, "MAXLEN", maxlen)
        _opt(args, "IMPORTRATE", importrate)
        return self._run(Call(args, scan_page(text), pin=node))

    def jscan_page(self, cursor: int = 0, count: Optional[int] = None, busyloop: bool = False,
                   queues: Iterable = (), states: Iterable = (), reply: str = "id",
                   node: Optional[str] = None):
        """One JSCAN page: a :class:`Page` of job IDs, or of dicts of the
        jobs' fields with ``reply="all"``."""
        args = ["JSCAN", int(cursor)]
        _opt(args, "COUNT", count)
        if busyloop:
            args.append("BUSYLOOP")
        for queue in queues:
            args += ("QUEUE", queue)
        for state in states:
            args += ("STATE", state)
        args += ("REPLY", reply)
        items = pairs if reply == "all" else text
        return self._run(Call(args, scan_page(items), pin=node))

    # -- Server ------------------------------------------------------------------

    def hello(self):
        """HELLO, as :class:`~disque.client.job.Hello`."""
        return self._run(Call(["HELLO"], parse_hello))

    def info(self, section: Optional[str] = None):
        """INFO (or one section) as a flat dict of strings."""
        return self._run(Call(["INFO"] + ([section] if section else []), parse_info))

    def ping(self):
        return self._run(Call(["PING"], text_reply))

    def time(self):
        """TIME: the node's clock as ``(seconds, microseconds)``."""
        return self._run(Call(["TIME"], lambda reply, node: (int(reply[0]), int(reply[1]))))

    def config_get(self, pattern: str):
        """CONFIG GET: the matching directives as a dict of strings."""
        return self._run(Call(["CONFIG", "GET", pattern],
                              lambda reply, node: {text(reply[i]): text(reply[i + 1])
                                                   for i in range(0, len(reply) - 1, 2)}))

    def config_set(self, name: str, value):
        """CONFIG SET (a refused value raises ResponseError)."""
        return self._run(Call(["CONFIG", "SET", name, value], text_reply))

    def bgrewriteaof(self):
        """BGREWRITEAOF: the node's status line."""
        return self._run(Call(["BGREWRITEAOF"], text_reply))

    # -- Cluster administration (run on the current node) ------------------------------

    def cluster_meet(self, host: str, port: int):
        """CLUSTER MEET: introduce the node at ``host:port``."""
        return self._run(Call(["CLUSTER", "MEET", host, int(port)], text_reply))

    def cluster_forget(self, node_id: str):
        """CLUSTER FORGET: drop a node from this node's table."""
        return self._run(Call(["CLUSTER", "FORGET", node_id], text_reply))

    def cluster_leaving(self, leaving: bool = True):
        """CLUSTER LEAVING yes|no: start (or stop) draining the current node.
        The client then moves to another node itself (its HELLO priority)."""
        return self._run(Call(["CLUSTER", "LEAVING", "yes" if leaving else "no"], text_reply))

    def cluster_info(self):
        """CLUSTER INFO as a dict of strings."""
        return self._run(Call(["CLUSTER", "INFO"], parse_info))

    def cluster_nodes(self):
        """CLUSTER NODES: the node table, one line per node (``str``)."""
        return self._run(Call(["CLUSTER", "NODES"], text_reply))

    def _then(self, result, f):
        """Apply ``f`` to a result of ``_run`` (a value here; the Twisted
        client chains it on the Deferred)."""
        return f(result)
