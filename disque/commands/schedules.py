"""SCHEDULE: recurring jobs, kept by every node and fired once per run
(an extension of this project, docs/extensions.md; the core's side is
:mod:`disque.core.recurring`, the definition :mod:`disque.core.cronspec`).

::

    SCHEDULE ADD <name> <queue> <body> (CRON <expr> [TZ <zone>] | EVERY <ms>)
                 [CATCHUP skip|one|all] [ADDJOB options: REPLICATE, TTL, RETRY,
                 DELAY, MAXLEN, PRIORITY, BACKOFF, MAXDELIVERIES, DEADLETTER]
    SCHEDULE DEL <name>
    SCHEDULE PAUSE <name>
    SCHEDULE RESUME <name>
    SCHEDULE LIST
    SCHEDULE SHOW <name> [NEXT <count>]

ADD creates or replaces (a new version); every change goes through the
catalog, so it reaches every node and the AOF.  Parsing and replies only.
"""

from ..core.addjob import E_DELAY_TTL, E_RETRY_ZERO
from ..core.cronspec import (CATCHUP_BY_VALUE, CATCHUP_NAMES, MAX_EVERY_MS, MIN_EVERY_MS, ScheduleSpec,
                             check_cron, encode_spec)
from ..access.acl import NOPERM_QUEUE
from ..core.errors import CommandError
from ..core.recurring import KIND, MAX_NAME_LEN
from ..resp import reply
from . import command
from .args import parse_ll, subcommand
from .shown import client_info
from .jobs import SYNTAX, job_options, render_fields

ARITIES = {b"add": -7, b"del": 3, b"pause": 3, b"resume": 3, b"list": 2, b"show": (3, 5)}
MAX_NEXT = 100

E_NAME = CommandError(b"ERR", b"schedule name must be 1 to %d bytes" % MAX_NAME_LEN)
E_WHEN = CommandError(b"ERR", b"SCHEDULE ADD needs CRON <expression> [TZ <zone>] or EVERY <ms>, not both")
E_EVERY = CommandError(b"ERR", b"EVERY must be between %d and %d milliseconds" % (MIN_EVERY_MS, MAX_EVERY_MS))
E_CATCHUP = CommandError(b"ERR", b"CATCHUP must be skip, one or all")
E_OPTION = CommandError(b"ERR", b"ASYNC and DEDUP are not options of a schedule: each run is added with its "
                                b"copies, under a DEDUP key of its own")
E_NOSUCH = CommandError(b"ERR", b"no such schedule")
E_NEXT = CommandError(b"ERR", b"NEXT must be between 1 and %d" % MAX_NEXT)


@command("schedule", -2, "write denyoom")
def schedule(ctx, client, argv):
    name, fits = subcommand(argv, ARITIES)
    if name is None:
        raise CommandError(b"ERR", b"Unknown SCHEDULE subcommand '" + reply.one_line(argv[1]) + b"'")
    if not fits:
        raise CommandError(b"ERR", b"Wrong number of arguments for SCHEDULE " + name.upper())
    node = ctx.node
    user = client.user
    if name == b"list":  # a user limited to some queues sees the schedules of those
        specs = node.recurring.specs
        return reply.bulk_array(sorted(n for n, (_, spec) in specs.items()
                                       if user.all_queues or user.may_queue(spec.queue)))
    if not 0 < len(argv[2]) <= MAX_NAME_LEN:
        raise E_NAME
    held = node.recurring.get(argv[2])
    if held is not None and not user.all_queues and not user.may_queue(held[1].queue):
        # The schedule's queue is another's: answered as the queue would be
        # (the queue an ADD names is checked by the dispatcher; this is the
        # queue of the schedule it would replace).
        ctx.acl.record(b"queue", held[1].queue, user.name, client_info(ctx, client))
        return NOPERM_QUEUE
    if name == b"add":
        spec = _parse_add(node, argv)
        node.settings.change(KIND, argv[2], encode_spec(spec))
        return reply.OK
    if name == b"del":
        if held is None:
            return reply.integer(0)
        node.settings.change(KIND, argv[2], b"")
        return reply.integer(1)
    if held is None:
        raise E_NOSUCH
    version, spec = held
    if name == b"show":
        count = 3
        if len(argv) == 5:
            if argv[3].lower() != b"next":
                raise SYNTAX
            count = parse_ll(argv[4])
            if count is None or not 0 < count <= MAX_NEXT:
                raise E_NEXT
        return render_fields(_fields(node, argv[2], version, spec, count))
    paused = name == b"pause"
    if spec.paused != paused:
        # RESUME: runs due while it was paused are not owed.
        spec = spec._replace(paused=paused, since=spec.since if paused else node.now)
        node.settings.change(KIND, argv[2], encode_spec(spec))
    return reply.OK


def _parse_add(node, argv) -> ScheduleSpec:
    """SCHEDULE ADD's arguments, checked: the spec to store."""
    cron = tz = b""
    every = 0
    catchup = None
    rest = []
    i, argc = 5, len(argv)
    while i < argc:
        opt = argv[i].lower()
        last = i == argc - 1
        if opt == b"cron" and not last:
            cron = argv[i + 1]
            i += 2
        elif opt == b"tz" and not last:
            tz = argv[i + 1]
            i += 2
        elif opt == b"every" and not last:
            every = parse_ll(argv[i + 1])
            if every is None or not MIN_EVERY_MS <= every <= MAX_EVERY_MS:
                raise E_EVERY
            i += 2
        elif opt == b"catchup" and not last:
            catchup = CATCHUP_NAMES.get(argv[i + 1].lower())
            if catchup is None:
                raise E_CATCHUP
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    if bool(cron) == bool(every) or tz and not cron:
        raise E_WHEN
    if cron:
        problem = check_cron(cron, tz)
        if problem:
            raise CommandError(b"ERR", problem.encode())
    args = job_options(node, [None] * 4 + rest, 4, argv[3])
    if args.async_ or args.dedup is not None:
        raise E_OPTION
    if args.delay >= args.ttl:
        raise E_DELAY_TTL
    if args.repl is not None and args.repl > 1 and args.retry == 0:
        raise E_RETRY_ZERO
    now = node.now
    return ScheduleSpec(False, catchup or 0, every, now, now, cron, tz, argv[3], argv[4], args.repl or 0,
                        args.retry, args.ttl, args.delay, args.maxlen, args.opts)


def _fields(node, name, version, spec, count) -> list:
    p = node.recurring.progress.get(name)
    error = node.recurring.errors.get(name)
    return [
        (b"name", name), (b"version", version), (b"queue", spec.queue), (b"body", spec.body),
        (b"when", spec.describe()), (b"state", b"paused" if spec.paused else b"active"),
        (b"catchup", CATCHUP_BY_VALUE[spec.catchup]), (b"repl", spec.repl), (b"ttl", spec.ttl),
        (b"retry", spec.retry), (b"delay", spec.delay), (b"maxlen", spec.maxlen),
        (b"next", tuple(node.recurring.upcoming(name, count))),
        (b"last-fire", p.last if p is not None and p.last else None),
        (b"runs", p.runs if p is not None else 0), (b"skipped", p.skipped if p is not None else 0),
        (b"fired-here", node.recurring.fired_here.get(name, 0)),
        (b"last-error", error),
    ]
