"""Commands that say where time went: SLOWLOG (the slow commands) and
LATENCY (spikes by event, and the DOCTOR's report, in the original's
words)."""

from ..resp import reply
from . import command
from .args import parse_int_or_error, subcommand
from .jobs import SYNTAX


SLOWLOG_ERR = b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"
SLOWLOG_ARITY = {b"len": 2, b"reset": 2, b"get": (2, 3)}


@command("slowlog", -2, "readonly")
def slowlog(ctx, client, argv):
    sub, fits = subcommand(argv, SLOWLOG_ARITY)
    if not fits:
        return SLOWLOG_ERR
    log = ctx.slowlog
    if sub == b"len":
        return reply.integer(len(log.entries))
    if sub == b"reset":
        log.entries.clear()
        return reply.OK
    if sub == b"get":
        n = 10
        if len(argv) == 3:
            n = parse_int_or_error(argv[2])
        entries = list(log.entries)[: n if n >= 0 else None]
        return reply.array(
            reply.array((reply.integer(eid), reply.integer(ts), reply.integer(us), reply.bulk_array(args)))
            for eid, ts, us, args in entries)
    return SLOWLOG_ERR


LATENCY_DOCTOR = (b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
                  b"instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in "
                  b"order to enable it. If we weren't in a deep space mission I'd suggest to take a look "
                  b"at http://disque.io/topics/latency-monitor.\n")


LATENCY_CALM = (b"Dave, no latency spike was observed during the lifetime of this Disque instance, not in "
                b"the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and "
                b"think things over.\n")
LATENCY_SPIKES = (b"Dave, I have observed latency spikes in this Disque instance. You don't mind talking "
                  b"about it, do you Dave?\n\n")
LATENCY_ADVICE = {
    b"command": b"- Some commands are slow: SLOWLOG GET shows which ones (long QPEEK, JSCAN or QSCAN "
                b"ranges, large job bodies, many IDs per ACKJOB or DELJOB).",
    b"fast-command": b"- Commands that should be quick took long: the node did not get the CPU (system "
                     b"load, other processes) or a garbage collection paused it (see gc-freeze-interval).",
}


LATENCY_ARITY = {b"latest": 2, b"history": 3, b"reset": -2, b"doctor": 2}


@command("latency", -2, "readonly admin loading")
def latency(ctx, client, argv):
    sub, fits = subcommand(argv, LATENCY_ARITY)
    if not fits:
        raise SYNTAX
    events = ctx.latency.events
    if sub == b"latest":
        return reply.array(reply.array((reply.bulk(name), reply.integer(s.samples[-1][0]),
                                        reply.integer(s.samples[-1][1]), reply.integer(s.max)))
                           for name, s in events.items())
    if sub == b"history":
        series = events.get(argv[2])
        samples = series.samples if series is not None else ()
        return reply.array(reply.array((reply.integer(t), reply.integer(ms))) for t, ms in samples)
    if sub == b"reset":
        return reply.integer(ctx.latency.reset(argv[2:]))
    if sub == b"doctor":
        return reply.bulk(latency_report(ctx))
    raise SYNTAX


def latency_report(ctx) -> bytes:
    """LATENCY DOCTOR: per event, the spikes seen and their statistics, then
    what to look at."""
    events = ctx.latency.events
    if not events:
        return LATENCY_CALM if ctx.latency_threshold else LATENCY_DOCTOR
    now = ctx.node.now // 1000
    out = [LATENCY_SPIKES]
    for number, (name, series) in enumerate(events.items(), 1):
        values = [ms for _, ms in series.samples]
        average = sum(values) // len(values)
        deviation = sum(abs(average - ms) for ms in values) // len(values)
        period = max(now - series.samples[0][0], 1)
        out.append(b"%d. %s: %d latency spikes (average %dms, mean deviation %dms, period %.2f sec). "
                   b"Worst all time event %dms.\n" % (number, name, len(values), average, deviation,
                                                      period / len(values), series.max))
    advice = [LATENCY_ADVICE[name] for name in events if name in LATENCY_ADVICE]
    if advice:
        out.append(b"\nI have a few advices for you:\n\n" + b"\n".join(advice) + b"\n")
    return b"".join(out)
