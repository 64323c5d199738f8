"""Job commands: ADDJOB, SHOW, ACKJOB, FASTACK, DELJOB, WORKING, NACK,
ENQUEUE, DEQUEUE, LOADJOB, JSCAN.  Parsing and reply shaping only; the state
changes live in :mod:`disque.core.node`."""

from ..core.job import DEFAULT_TTL, STATE_BY_NAME, WAIT_REPL
from ..core.limits import (MAX_BACKOFF_MS, MAX_DELIVERIES, MAX_JOB_SECONDS, MAX_NACK_DELAY_MS, PRIORITY_DEFAULT,
                           PRIORITY_MAX, PRIORITY_MIN)
from ..core.options import JobOptions
from ..core.dedup import MAX_KEY_LEN
from ..core.errors import CommandError
from ..resp import reply
from ..contract import ReplySlot
from . import command
from .views import job_fields
from .args import parse_cursor, parse_int_or_error, parse_ll, parse_timeout, validate_ids

SYNTAX = CommandError(b"ERR", b"syntax error")


# ----------------------------------------------------------------------
# ADDJOB queue job <ms-timeout> [REPLICATE n] [DELAY s] [RETRY s] [TTL s]
#        [MAXLEN n] [ASYNC] [DEDUP key]
#
# DEDUP is this project's extension (disque.core.dedup): a repeated ADDJOB
# with a key already used in the queue answers the existing job's ID, after
# the same checks of its arguments but before any check of the node's state
# (a retry of an ADDJOB that succeeded succeeds, even if the queue is paused
# or full by now).  One still waiting for its copies gets that outcome.
# ----------------------------------------------------------------------

def _opt(argv, i, error):
    n = parse_ll(argv[i + 1])
    if n is None:
        raise error
    return n


E_REPL = CommandError(b"ERR", b"REPLICATE must be between 1 and 65535")
E_TTL = CommandError(b"ERR", b"TTL must be a number > 0")
E_RETRY = CommandError(b"ERR", b"RETRY time must be a non negative number")
E_DELAY = CommandError(b"ERR", b"DELAY time must be a non negative number")
E_MAXLEN = CommandError(b"ERR", b"MAXLEN must be a positive number")
E_DEDUP = CommandError(b"ERR", b"DEDUP key must be between 1 and %d bytes" % MAX_KEY_LEN)
E_PRIORITY = CommandError(b"ERR", b"PRIORITY must be between %d and %d" % (PRIORITY_MIN, PRIORITY_MAX))
E_BACKOFF = CommandError(b"ERR", b"BACKOFF must be FIXED <ms> or EXP <base-ms> <max-ms>, "
                                  b"with 0 < ms, 0 < base-ms <= max-ms <= %d" % MAX_BACKOFF_MS)
E_MAXDELIVERIES = CommandError(b"ERR", b"MAXDELIVERIES must be between 1 and %d" % MAX_DELIVERIES)
E_DEADLETTER = CommandError(b"ERR", b"DEADLETTER must name a queue other than the job's own")
E_DEADLETTER_ALONE = CommandError(b"ERR", b"DEADLETTER needs MAXDELIVERIES (or the max-deliveries directive)")
E_NACK_DELAY = CommandError(b"ERR", b"NACK DELAY must be a number of milliseconds between 0 and %d"
                                    % MAX_NACK_DELAY_MS)
E_TOO_LONG = CommandError(b"ERR", b"TTL, DELAY and RETRY must be at most %d seconds" % MAX_JOB_SECONDS)


class JobArgs:
    """ADDJOB's options as parsed by :func:`job_options` (SCHEDULE ADD
    takes the same ones, disque.commands.schedules).  ``repl`` None: not
    given (the default depends on the cluster's size when the job is made)."""

    __slots__ = ("repl", "ttl", "retry", "delay", "maxlen", "async_", "dedup", "opts")

    def __init__(self):
        self.repl = None
        self.ttl = DEFAULT_TTL
        self.retry = -1
        self.delay = 0
        self.maxlen = 0
        self.async_ = False
        self.dedup = None
        self.opts = None


def job_options(node, argv, i, queue) -> JobArgs:
    """ADDJOB's options ``argv[i:]`` for a job of ``queue``, checked as
    ADDJOB checks them (raises CommandError)."""
    args = JobArgs()
    priority = None  # the extensions (docs/extensions.md): JobOptions if any is used
    backoff = backoff_max = 0
    max_deliveries = node.addjob.max_deliveries
    deadletter = b""
    argc = len(argv)
    while i < argc:
        opt = argv[i].lower()
        last = i == argc - 1
        if opt == b"replicate" and not last:
            args.repl = _opt(argv, i, E_REPL)
            if not 0 < args.repl <= 65535:
                raise E_REPL
            i += 1
        elif opt == b"ttl" and not last:
            args.ttl = _opt(argv, i, E_TTL)
            if args.ttl <= 0:
                raise E_TTL
            i += 1
        elif opt == b"retry" and not last:
            args.retry = _opt(argv, i, E_RETRY)
            if args.retry < 0:
                raise E_RETRY
            i += 1
        elif opt == b"delay" and not last:
            args.delay = _opt(argv, i, E_DELAY)
            if args.delay < 0:
                raise E_DELAY
            i += 1
        elif opt == b"maxlen" and not last:
            args.maxlen = _opt(argv, i, E_MAXLEN)
            if args.maxlen <= 0:
                raise E_MAXLEN
            i += 1
        elif opt == b"async":
            args.async_ = True
        elif opt == b"priority" and not last:
            priority = _opt(argv, i, E_PRIORITY)
            if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
                raise E_PRIORITY
            i += 1
        elif opt == b"backoff" and i + 2 < argc:
            kind = argv[i + 1].lower()
            backoff = _opt(argv, i + 1, E_BACKOFF)
            if kind == b"fixed":
                backoff_max = backoff
                i += 2
            elif kind == b"exp" and i + 3 < argc:
                backoff_max = _opt(argv, i + 2, E_BACKOFF)
                i += 3
            else:
                raise E_BACKOFF
            if not 0 < backoff <= backoff_max <= MAX_BACKOFF_MS:
                raise E_BACKOFF
        elif opt == b"maxdeliveries" and not last:
            max_deliveries = _opt(argv, i, E_MAXDELIVERIES)
            if not 0 < max_deliveries <= MAX_DELIVERIES:
                raise E_MAXDELIVERIES
            i += 1
        elif opt == b"deadletter" and not last:
            deadletter = argv[i + 1]
            if not deadletter or deadletter == queue:
                raise E_DEADLETTER
            i += 1
        elif opt == b"dedup" and not last:
            args.dedup = argv[i + 1]
            if not 0 < len(args.dedup) <= MAX_KEY_LEN:
                raise E_DEDUP
            i += 1
        else:
            raise SYNTAX
        i += 1
    if args.ttl > MAX_JOB_SECONDS or args.retry > MAX_JOB_SECONDS or args.delay > MAX_JOB_SECONDS:
        raise E_TOO_LONG
    if priority is not None or backoff or max_deliveries or deadletter:
        if deadletter and not max_deliveries:
            raise E_DEADLETTER_ALONE
        args.opts = JobOptions(PRIORITY_DEFAULT if priority is None else priority, backoff, backoff_max,
                               max_deliveries, deadletter, b"", b"")
    return args


@command("addjob", -4, "write denyoom fast")
def addjob(ctx, client, argv):
    node = ctx.node
    if len(argv) > 4:
        args = job_options(node, argv, 4, argv[1])
        repl, ttl, retry, delay, maxlen = args.repl, args.ttl, args.retry, args.delay, args.maxlen
        async_, dedup, opts = args.async_, args.dedup, args.opts
    else:
        repl = None
        ttl = DEFAULT_TTL
        retry = -1
        delay = maxlen = 0
        async_ = False
        dedup = None
        opts = None
        if node.addjob.max_deliveries:  # the max-deliveries directive alone makes options
            opts = job_options(node, argv, 4, argv[1]).opts
    if repl is None:
        repl = node.cluster.default_replication()
    timeout = parse_timeout(argv[3])
    job = None
    if dedup is not None:
        job = node.addjob.find_dedup(argv[1], dedup)
        if type(job) is bytes:  # the ID of a job gone within the window
            return b"+" + job + b"\r\n"
    if job is None:
        job = node.addjob.add(argv[1], argv[2], repl, delay, retry, ttl, maxlen, async_, dedup, opts)
    if job.state == WAIT_REPL:  # new, or a repeat of one still replicating: its outcome
        slot = ReplySlot(client.conn)
        node.addjob.await_replication(job, slot, timeout, b"+" + job.id + b"\r\n", NOREPL_TIMEOUT)
        return slot
    return b"+" + job.id + b"\r\n"


NOREPL_TIMEOUT = b"-NOREPL Timeout reached before replicating to the requested number of nodes\r\n"


# ----------------------------------------------------------------------
# SHOW / JSCAN
# ----------------------------------------------------------------------

def render_job_info(node, job) -> bytes:
    """SHOW's reply: a flat array of names and values."""
    return render_fields(job_fields(node, job))


def render_fields(fields) -> bytes:
    """A flat array of names and values from ``(name, value)`` pairs, each
    value an int, bytes, a tuple of ints or of bytes, or None (a null):
    SHOW's reply, and SCHEDULE SHOW's."""
    out = []
    for name, value in fields:
        out.append(reply.bulk(name))
        if value is None:
            out.append(reply.NULL_BULK)
        elif isinstance(value, int):
            out.append(reply.integer(value))
        elif isinstance(value, tuple):
            if value and isinstance(value[0], int):
                out.append(reply.array(reply.integer(v) for v in value))
            else:
                out.append(reply.bulk_array(value))
        else:
            out.append(reply.bulk(value))
    return reply.array(out)


@command("show", 2, "readonly fast")
def show(ctx, client, argv):
    validate_ids(argv[1:2])
    job = ctx.node.jobs.get(argv[1])
    if job is None:
        return reply.NULL_BULK
    return render_job_info(ctx.node, job)


def scan_options(argv, extra):
    """Shared QSCAN / JSCAN option loop: ``extra(opt, value)`` handles the
    command's own options and returns False for unknown ones.  The first
    non-option argument is the cursor; a second one is a syntax error."""
    count = 100
    busyloop = False
    cursor = None
    i = 1
    argc = len(argv)
    while i < argc:
        opt = argv[i].lower()
        has_value = i < argc - 1
        if opt == b"count" and has_value:
            count = parse_int_or_error(argv[i + 1])
            i += 2
            continue
        if opt == b"busyloop":
            busyloop = True
            i += 1
            continue
        if has_value and extra(opt, argv[i + 1]):
            i += 2
            continue
        if cursor is not None:
            raise SYNTAX
        cursor = parse_cursor(argv[i])
        if cursor is None:
            raise CommandError(b"ERR", b"invalid cursor or option name")
        i += 1
    if count < 0:
        busyloop = True
    return cursor or 0, count, busyloop


def scan_reply(cursor: int, items) -> bytes:
    """QSCAN / JSCAN's reply: the next cursor (a bulk string), then the
    array of ``items`` (already-encoded replies)."""
    return reply.array((reply.bulk(b"%d" % cursor), reply.array(items)))


@command("jscan", -1, "readonly")
def jscan(ctx, client, argv):
    states = set()
    queue = [None]
    reply_all = [False]

    def extra(opt, value):
        if opt == b"queue":
            queue[0] = value
        elif opt == b"state":
            state = STATE_BY_NAME.get(value.lower())
            if state is None:
                raise CommandError(b"ERR", b"Invalid job state name")
            states.add(state)
        elif opt == b"reply":
            v = value.lower()
            if v not in (b"id", b"all"):
                raise CommandError(b"ERR", b"Invalid REPLY type, try ID or ALL")
            reply_all[0] = v == b"all"
        else:
            return False
        return True

    cursor, count, busyloop = scan_options(argv, extra)
    q = queue[0]
    user = client.user
    mine = user.may_queue if not user.all_queues else None  # a tenant sees its queues' jobs only

    def match(job):
        # Dummy ACKs (no known copy) are not jobs a client cares about.
        return bool(job.delivered) and (q is None or job.queue == q) and \
            (not states or job.state in states) and (mine is None or mine(job.queue))

    cursor, jobs = ctx.node.jobs.table.scan(cursor, count, match, busyloop)
    if reply_all[0]:
        return scan_reply(cursor, [render_job_info(ctx.node, j) for j in jobs])
    return scan_reply(cursor, [reply.status(j.id) for j in jobs])


# ----------------------------------------------------------------------
# ACKJOB, FASTACK, DELJOB, ENQUEUE, DEQUEUE, NACK, WORKING, LOADJOB
# ----------------------------------------------------------------------

@command("ackjob", -1, "write fast")
def ackjob(ctx, client, argv):
    ids = argv[1:]
    validate_ids(ids)
    return reply.integer(ctx.node.acks.ack_jobs(ids))


@command("fastack", -1, "write fast")
def fastack(ctx, client, argv):
    ids = argv[1:]
    validate_ids(ids)
    return reply.integer(ctx.node.acks.fast_ack(ids))


@command("deljob", -1, "write fast")
def deljob(ctx, client, argv):
    ids = argv[1:]
    validate_ids(ids)
    return reply.integer(ctx.node.acks.delete_jobs(ids))


@command("enqueue", -1, "write denyoom fast")
def enqueue(ctx, client, argv):
    ids = argv[1:]
    validate_ids(ids)
    return reply.integer(ctx.node.requeue.enqueue_jobs(ids))


@command("nack", -1, "write denyoom fast")
def nack(ctx, client, argv):
    """NACK id... [DELAY ms] (DELAY: this project's extension)."""
    delay = None
    ids = argv[1:]
    if len(argv) > 2 and argv[-2].lower() == b"delay":
        delay = parse_ll(argv[-1])
        if delay is None or not 0 <= delay <= MAX_NACK_DELAY_MS:
            raise E_NACK_DELAY
        ids = argv[1:-2]
    validate_ids(ids)
    return reply.integer(ctx.node.requeue.nack_jobs(ids, delay))


@command("revive", -2, "write denyoom")
def revive(ctx, client, argv):
    """REVIVE id... (this project's extension, docs/extensions.md): each
    dead letter back in the queue it came from; an array of the new IDs,
    null for an ID that is no dead letter on this node."""
    ids = argv[1:]
    validate_ids(ids)
    return reply.array(reply.bulk_or_null(ctx.node.dead_letters.revive(job_id)) for job_id in ids)


@command("dequeue", -1, "write fast")
def dequeue(ctx, client, argv):
    ids = argv[1:]
    validate_ids(ids)
    return reply.integer(ctx.node.requeue.dequeue_jobs(ids))


@command("working", 2, "write fast")
def working(ctx, client, argv):
    validate_ids(argv[1:2])
    return reply.integer(ctx.node.requeue.working(argv[1]))


@command("loadjob", 2, "write")
def loadjob(ctx, client, argv):
    return reply.err(b"LOADJOB is a special command only processed from AOF")
