"""What SHOW and the HTTP side both present: read-only views of the node.

SHOW renders :func:`job_fields` as RESP (disque.commands.jobs), the HTTP
API as JSON (:func:`job_json`); the API's other pages (the node, the
cluster, the queue list, a queue and its oldest jobs) are built here too,
from the command :class:`~disque.commands.context.Context` a handler sees.

Invariants: nothing here changes state (a view reads the node and the
runtime's facts, never runs a command; what may be shown to whom is
checked before, as the RESP command the page stands for:
disque.http.dispatch.refused); names and bodies are bytes in the core and
UTF-8 text here (invalid bytes replaced; a body that is not UTF-8 comes as
``body_base64``).
"""

import base64
import heapq

from .. import DISQUE_VERSION
from ..core.job import ACTIVE, F_NACK_DELAYED, STATE_NAMES
from ..core.queue import PAUSE_NAMES, PAUSED_ALL

#: Bytes of each body in a queue's job list.
BODY_PREVIEW = 1024


def text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def job_fields(node, job) -> list:
    """SHOW's fields of ``job`` in SHOW's order, as ``(name, value)`` with
    ``value`` an int, bytes, a tuple of bytes or of ints, or None (a null): what the
    SHOW reply (disque.commands.jobs) and the HTTP API (:func:`job_json`)
    both render."""
    now = node.now
    ttl = -(-(job.etime - now) // 1000)
    fields = [
        (b"id", job.id), (b"queue", job.queue), (b"state", STATE_NAMES[job.state]), (b"repl", job.repl),
        (b"ttl", ttl if ttl > 0 else 0), (b"ctime", job.ctime), (b"delay", job.delay), (b"retry", job.retry),
        (b"nacks", job.nacks), (b"additional-deliveries", job.deliv), (b"nodes-delivered", tuple(job.delivered)),
        (b"nodes-confirmed", tuple(job.confirmed or ())),
        (b"next-requeue-within", max(job.qtime - now, 0) if job.qtime else None),
        (b"next-awake-within", max(job.awake - now, 0) if job.awake else None),
        (b"body", job.body),
    ]
    if job.dedup is not None:
        fields.append((b"dedup", job.dedup))
    opts = job.opts
    if opts is not None:  # the extensions' fields (docs/extensions.md): only on jobs that use them
        fields.append((b"priority", opts.priority))
        if opts.backoff:
            fields.append((b"backoff", (opts.backoff, opts.backoff_max)))
        if opts.max_deliveries:
            fields.append((b"max-deliveries", opts.max_deliveries))
            fields.append((b"dead-letter", opts.deadletter_queue(opts.dead_from or job.queue)))
        if opts.dead_from:
            fields.append((b"dead-from", opts.dead_from))
            fields.append((b"dead-reason", opts.dead_reason))
    if job.flags & F_NACK_DELAYED and job.state == ACTIVE:
        fields.append((b"redeliver-at", job.qtime))
    return fields


def job_json(node, job, preview: int = 0) -> dict:
    """SHOW's fields as JSON (``preview``: at most that many body bytes)."""
    out = {}
    for name, value in job_fields(node, job):
        key = name.decode()
        if isinstance(value, bytes) and key != "body":
            value = text(value)
        elif isinstance(value, tuple):
            value = [v if isinstance(v, int) else text(v) for v in value]
        out[key] = value
    body = job.body
    truncated = preview and body is not None and len(body) > preview
    if truncated:
        body = body[:preview]
    out["body"] = None
    if body is not None:
        try:
            out["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(body).decode()
    out["body_truncated"] = bool(truncated)
    return out


def longest_first(q):
    """The order of queues in /metrics and the API: longest, then by name."""
    return -len(q.jobs), q.name


def node_summary(ctx) -> dict:
    """The node at a glance (the API's ``/api/node``): version, uptime,
    clients, jobs by state, memory, persistence (with a load's progress),
    the core's latency quantiles."""
    runtime, node = ctx.runtime, ctx.node
    process = runtime.process_info()
    used, rss, _ = runtime.memory()
    latency = node.latency
    return {
        "id": text(node.my_id), "version": DISQUE_VERSION, "runtime": process["runtime"],
        "uptime": process["uptime"], "time": node.now,
        "clients": {"connected": len(ctx.clients), "blocked": len(node.getjob)},
        "jobs": dict(total=len(node.jobs), **{k.replace("-", "_"): v for k, v in node.job_states().items()}),
        "queues": len(node.queues),
        "memory": {"used": used, "max": ctx.config["maxmemory"], "rss": rss},
        "persistence": dict(runtime.persistence_info()),
        "latency": {name: {"count": getattr(latency, name).count, "p50": getattr(latency, name).quantile(0.5),
                           "p99": getattr(latency, name).quantile(0.99)} for name, _ in latency.NAMES},
    }


def cluster_nodes(ctx) -> dict:
    """The cluster as this node sees it (``/api/nodes``): itself first,
    then the others by address."""
    cluster = ctx.node.cluster
    rows = []
    for n in cluster.nodes.values():
        myself = n is cluster.myself
        flags = [b"myself"] + ([b"leaving"] if cluster.leaving else []) if myself else n.flag_names()
        rows.append({
            "id": text(n.id), "address": "%s:%d" % (text(n.host), n.port), "myself": myself,
            "up": True if myself else bool(n.reachable), "connected": True if myself else bool(n.connected),
            "leaving": bool(cluster.leaving if myself else n.leaving),
            "flags": text(b",".join(flags) or b"noflags"),
        })
    rows.sort(key=lambda r: (not r["myself"], r["address"]))
    return {"myself": text(cluster.my_id), "nodes": rows}


def queue_row(ctx, q, rates) -> dict:
    """One queue as the API lists it; ``rates``: its (in, out, ack, nack)
    rates (disque.http.rates)."""
    now = ctx.node.now
    rate_in, rate_out, rate_ack, rate_nack = rates
    oldest = q.jobs[0].created_ms() if q.jobs else now
    return {
        "name": text(q.name), "len": len(q.jobs), "age": max(now - oldest, 0) // 1000,
        "added": q.jobs_in, "removed": q.jobs_out, "acked": q.acked, "nacked": q.nacked,
        "rate_in": rate_in, "rate_out": rate_out, "rate_ack": rate_ack, "rate_nack": rate_nack,
        "paused": text(PAUSE_NAMES[q.flags & PAUSED_ALL]), "blocked": len(q.waiting) if q.waiting else 0,
    }


def queue_list(ctx, user, wanted: bytes, limit: int, rates_of) -> dict:
    """The queues ``user`` may touch (all of them, for most users), as
    QSCAN shows a tenant its own; those whose name holds ``wanted``, the
    ``limit`` longest first; ``rates_of(name)``: a queue's rates."""
    node = ctx.node
    mine = list(node.queues.values()) if user.all_queues else [
        q for q in node.queues.values() if user.may_queue(q.name)]
    chosen = [q for q in mine if wanted in q.name] if wanted else mine
    shown = heapq.nsmallest(limit, chosen, key=longest_first)
    return {"time": node.now, "total": len(mine), "matching": len(chosen),
            "queues": [queue_row(ctx, q, rates_of(q.name)) for q in shown]}


def queue_jobs(ctx, user, q, count: int) -> list:
    """The oldest ``count`` jobs of ``q`` that ``user`` may see (a dead
    letter that came from another tenant's queue is left out), as JSON
    with a body preview."""
    jobs = q.jobs.head(count)
    if not user.all_queues:
        jobs = [j for j in jobs if user.may_job(j)]
    return [job_json(ctx.node, j, BODY_PREVIEW) for j in jobs]


def find_queue(ctx, name: bytes):
    """The queue ``name``, or None."""
    return ctx.node.queues.get(name)


def find_job(ctx, job_id: bytes):
    """The job ``job_id`` this node holds, or None."""
    return ctx.node.jobs.get(job_id)
