"""Queue commands: GETJOB, QLEN, QSTAT, QPEEK, QSCAN, PAUSE."""

from ..core.errors import CommandError
from ..core.qlimits import format_rate
from ..core.queue import PAUSED_ALL, PAUSED_IN, PAUSED_OUT, PAUSE_NAMES
from ..resp import reply
from ..contract import BLOCKED
from . import command
from .args import parse_int_or_error, parse_ll, parse_timeout
from .jobs import SYNTAX, scan_options, scan_reply

LEAVING = b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n"
E_COUNT = CommandError(b"ERR", b"COUNT must be a number greater than zero")


# GETJOB's jobs are framed by hand, not with reply.array / reply.bulk: they
# are on the request path of every consumer, and one job's [queue, id, body]
# built with the shared encoders took 3x as long (0.6 us against 0.2 us on
# CPython 3.11, 1.6x on PyPy 3.9; timed per job over 100-job batches).
# A reply is one join of its parts, each body copied once: a body formatted
# in with % is copied by PyPy byte by byte (8.5 us for 4 KB, 86 us for 64 KB
# against 0.6 and 17 us joined), and an array header added in front with +
# copies the whole reply again.
# tests/process/test_golden.py compares their bytes with the original's.
def _job_parts(job, parts) -> None:
    q = job.queue
    body = job.body
    parts += (b"*3\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n" % (len(q), q, job.id, len(body)), body, b"\r\n")


def _job_counters_parts(job, parts) -> None:
    q = job.queue
    body = job.body
    parts += (b"*7\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n" % (len(q), q, job.id, len(body)), body,
              b"\r\n$5\r\nnacks\r\n:%d\r\n$21\r\nadditional-deliveries\r\n:%d\r\n" % (job.nacks, job.deliv))


def render_jobs(jobs, withcounters: bool = False) -> bytes:
    """The array of ``jobs`` (a list) as GETJOB gives it, with the
    counters (WITHCOUNTERS) or not: one join."""
    add = _job_counters_parts if withcounters else _job_parts
    parts = [b"*%d\r\n" % len(jobs)]
    for job in jobs:
        add(job, parts)
    return b"".join(parts)


def _serve_with_counters(jobs):
    return render_jobs(jobs, True)


# GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM q1 ... qN
@command("getjob", -2, "write fast")
def getjob(ctx, client, argv):
    timeout = 0
    count = 1
    nohang = False
    withcounters = False
    queues = None
    argc = len(argv)
    i = 1
    while i < argc:
        opt = argv[i].lower()
        last = i == argc - 1
        if opt == b"nohang":
            nohang = True
        elif opt == b"withcounters":
            withcounters = True
        elif opt == b"timeout" and not last:
            timeout = parse_timeout(argv[i + 1])
            i += 1
        elif opt == b"count" and not last:
            count = parse_ll(argv[i + 1])
            if count is None or count <= 0:
                raise E_COUNT
            i += 1
        elif opt == b"from":
            queues = argv[i + 1:]
            break
        else:
            raise SYNTAX
        i += 1
    if not queues:
        raise SYNTAX
    node = ctx.node
    jobs = node.getjob.get_jobs(queues, count, client)
    if jobs:
        return render_jobs(jobs, withcounters)
    if nohang:
        return reply.NULL_ARRAY
    if node.cluster.leaving:
        return LEAVING
    node.getjob.block(client, queues, timeout, _serve_with_counters if withcounters else render_jobs, reply.NULL_ARRAY)
    return BLOCKED


@command("qlen", 2, "readonly fast")
def qlen(ctx, client, argv):
    q = ctx.node.queues.get(argv[1])
    return reply.integer(len(q.jobs) if q is not None else 0)


@command("qpeek", 3, "readonly")
def qpeek(ctx, client, argv):
    count = parse_int_or_error(argv[2])
    q = ctx.node.queues.get(argv[1])
    if q is None or not q.jobs or count == 0:
        return reply.EMPTY_ARRAY
    n = len(q.jobs)
    count = max(-n, min(count, n))  # -2**63 has no positive in islice's range
    picked = q.jobs.head(count) if count > 0 else q.jobs.tail(-count)
    return render_jobs(list(picked))


@command("qstat", 2, "readonly fast")
def qstat(ctx, client, argv):
    node = ctx.node
    q = node.queues.get(argv[1])
    if q is None:
        return reply.NULL_ARRAY
    now_s = node.now // 1000
    fed = q.fed
    sources = fed.sources() if fed is not None else ()
    rate = fed.import_rate(node.now) if fed is not None else 0
    fields = [
        b"$4\r\nname\r\n", reply.bulk(q.name),
        b"$3\r\nlen\r\n", reply.integer(len(q.jobs)),
        b"$3\r\nage\r\n", reply.integer(max(now_s - q.ctime, 0)),
        b"$4\r\nidle\r\n", reply.integer(max(now_s - q.atime, 0)),
        b"$7\r\nblocked\r\n", reply.integer(len(q.waiting) if q.waiting else 0),
        b"$11\r\nimport-from\r\n", reply.bulk_array(sources),
        b"$11\r\nimport-rate\r\n", reply.integer(rate),
        b"$7\r\njobs-in\r\n", reply.integer(q.jobs_in),
        b"$8\r\njobs-out\r\n", reply.integer(q.jobs_out),
        b"$5\r\npause\r\n", reply.bulk(q.paused_name()),
    ]
    if q.dead:  # a dead-letter count (docs/extensions.md) only once there is one: the original's reply otherwise
        fields += (b"$4\r\ndead\r\n", reply.integer(q.dead))
    specs = node.recurring.specs
    if specs:  # the schedules adding to this queue (docs/extensions.md), only if there are some
        names = sorted(name for name, (_, spec) in specs.items() if spec.queue == q.name)
        if names:
            fields += (b"$9\r\nschedules\r\n", reply.bulk_array(names))
    limits = node.qlimits
    lim = limits.by_name.get(q.name) if limits.by_name else None
    if lim is not None:  # a limited queue (QLIMIT, docs/extensions.md): its limits and how often they held
        limit = lim.limit
        fields += (b"$4\r\nrate\r\n", reply.bulk(format_rate(limit.rate_milli)),
                   b"$5\r\nburst\r\n", reply.integer(limit.burst),
                   b"$11\r\nconcurrency\r\n", reply.integer(limit.concurrency),
                   b"$9\r\nin-flight\r\n", reply.integer(limits.inflight.get(q.name, 0)),
                   b"$4\r\nheld\r\n", reply.integer(lim.held))
    return reply.array(fields)


@command("qscan", -1, "readonly")
def qscan(ctx, client, argv):
    filters = {}

    def extra(opt, value):
        if opt in (b"minlen", b"maxlen", b"importrate"):
            filters[opt] = parse_int_or_error(value)
            return True
        return False

    cursor, count, busyloop = scan_options(argv, extra)
    minlen = filters.get(b"minlen")
    maxlen = filters.get(b"maxlen")
    rate = filters.get(b"importrate")
    now = ctx.node.now
    user = client.user
    mine = user.may_queue if not user.all_queues else None  # a tenant sees its own queues only

    def match(q):
        if mine is not None and not mine(q.name):
            return False
        n = len(q.jobs)
        if minlen is not None and n < minlen:
            return False
        if maxlen is not None and n > maxlen:
            return False
        if rate is not None and (q.fed.import_rate(now) if q.fed is not None else 0) < rate:
            return False
        return True

    cursor, queues = ctx.node.queues.scan(cursor, count, match, busyloop)
    return scan_reply(cursor, [reply.bulk(q.name) for q in queues])


_PAUSE_OPTS = {b"none": 0, b"in": PAUSED_IN, b"out": PAUSED_OUT, b"all": PAUSED_ALL}


@command("pause", -3, "readonly fast")
def pause(ctx, client, argv):
    node = ctx.node
    name = argv[1]
    q = node.queues.get(name)
    flags = 0
    update = False
    bcast = False
    for arg in argv[2:]:
        opt = arg.lower()
        if opt in _PAUSE_OPTS:
            bit = _PAUSE_OPTS[opt]
            flags = flags | bit if bit else 0
            update = True
        elif opt == b"state":
            pass
        elif opt == b"bcast":
            bcast = True
        else:
            raise SYNTAX
    if update and (q is not None or flags):
        current = node.queues.set_pause(name, flags, True)
    else:
        current = q.flags & PAUSED_ALL if q is not None else 0
    if bcast:
        node.queues.broadcast_pause(name, current)
    return b"+" + PAUSE_NAMES[current] + b"\r\n"
