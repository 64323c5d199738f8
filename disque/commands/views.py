"""What SHOW and the HTTP side both present: read-only views of the node.

SHOW renders :func:`job_fields` as RESP (disque.commands.jobs), the HTTP
API as JSON (:func:`job_json`); the API's other pages (the node, the
cluster, the queue list, a queue and its oldest jobs) and the figures of
``/metrics`` and of the dashboard's rates (:func:`node_counters`,
:func:`queue_counters`, :func:`cluster_peers`) are built here too, from
the command :class:`~disque.commands.context.Context` a handler sees: the
HTTP side reads the node through these alone.

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
from ..core.qlimits import format_rate
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
        (b"nodes-confirmed", tuple(node.addjob.confirmed_copies(job) or ())),
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


def job_json(ctx, job, preview: int = 0) -> dict:
    """SHOW's fields as JSON (``preview``: at most that many body bytes)."""
    out = {}
    for name, value in job_fields(ctx.node, job):
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


def node_counters(ctx) -> dict:
    """The node's own figures, read now (what ``/metrics`` exports and
    ``/api/node`` summarizes; INFO reads the same state): ``id`` (bytes),
    ``time`` (ms), ``blocked`` (clients blocked in GETJOB), ``jobs``
    (registered), ``job_states`` ({SHOW's state name: jobs}), ``acked``
    and ``nacked`` (:func:`ack_totals`), ``dead_letters`` (jobs moved to
    a dead-letter queue here), ``queues`` (registered), ``memory_tier``
    (0 below 75% of maxmemory, 1 above, 2 above 95%, 3 full),
    ``known_nodes`` (itself included), ``reachable_nodes`` (CLUSTER
    INFO's) and ``latency`` ({name: disque.core.latency.Histogram, in
    milliseconds}, in ``Latency.NAMES``' order: to be read, not
    changed)."""
    node = ctx.node
    cluster = node.cluster
    latency = node.latency
    acked, nacked = ack_totals(ctx)
    return {
        "id": node.my_id, "time": node.now, "blocked": len(node.getjob), "jobs": len(node.jobs),
        "job_states": node.job_states(), "acked": acked, "nacked": nacked, "dead_letters": node.dead_letters.moved,
        "queues": len(node.queues), "memory_tier": node.memory.level, "known_nodes": len(cluster.nodes),
        "reachable_nodes": cluster.reachable, "latency": {name: getattr(latency, name) for name, _ in latency.NAMES},
    }


def ack_totals(ctx) -> tuple:
    """``(acked, nacked)``: the jobs clients acknowledged here (ACKJOB,
    FASTACK) and the NACKs this node received, since it started."""
    node = ctx.node
    return node.acks.acked, node.queues.nacked


def node_summary(ctx) -> dict:
    """The node at a glance (the API's ``/api/node``): version, uptime,
    clients, jobs by state, memory, persistence (with a load's progress),
    the core's latency quantiles (None for a histogram with no sample:
    no time measured is not a time of 0)."""
    runtime = ctx.runtime
    counters = node_counters(ctx)
    process = runtime.process_info()
    used, rss, _ = runtime.memory()
    return {
        "id": text(counters["id"]), "version": DISQUE_VERSION, "runtime": process["runtime"],
        "uptime": process["uptime"], "time": counters["time"],
        "clients": {"connected": len(ctx.clients), "blocked": counters["blocked"]},
        "jobs": dict(total=counters["jobs"], **{k.replace("-", "_"): v for k, v in counters["job_states"].items()}),
        "queues": counters["queues"],
        "memory": {"used": used, "max": ctx.config["maxmemory"], "rss": rss},
        "persistence": dict(runtime.persistence_info()),
        "latency": {name: {"count": h.count, "p50": h.quantile(0.5) if h.count else None,
                           "p99": h.quantile(0.99) if h.count else None}
                    for name, h in counters["latency"].items()},
    }


def _counters(q) -> tuple:
    # A plain tuple: the rates sampler makes one per queue every second.
    return q.name, len(q.jobs), q.jobs_in, q.jobs_out, q.acked, q.nacked, q.paused_name()


def _visible_queues(ctx, visible) -> list:
    queues = ctx.node.queues.values()
    return list(queues) if visible is None else [q for q in queues if visible(q.name)]


def queue_counters(ctx, visible=None) -> list:
    """Every queue's counters, in no particular order, as ``(name,
    length, added, removed, acked, nacked, paused)``: the jobs waiting in
    it (QLEN), the jobs queued and taken out (QSTAT jobs-in and
    jobs-out), its jobs acknowledged and its NACKs received here, and its
    pause state (QSTAT pause: b"none", b"in", b"out" or b"all").
    ``visible``: None, or a test of queue names (a user's ``may_queue``):
    the queues it refuses are left out."""
    return [_counters(q) for q in _visible_queues(ctx, visible)]


def longest_queues(ctx, limit: int, visible=None) -> tuple:
    """``(longest, others)``: the counters (as :func:`queue_counters`
    gives them) of the ``limit`` longest queues (:func:`longest_first`),
    and those of all the other queues, in no particular order;
    ``visible`` as for :func:`queue_counters`.  One partial sort."""
    queues = _visible_queues(ctx, visible)
    head = heapq.nsmallest(limit, queues, key=longest_first)
    if len(head) == len(queues):
        return [_counters(q) for q in head], []
    chosen = {id(q) for q in head}
    return [_counters(q) for q in head], [_counters(q) for q in queues if id(q) not in chosen]


def schedule_rows(ctx, visible=None) -> list:
    """[(name, queue, paused, runs, skipped, fired here, last run ms or 0,
    next run ms)] of every schedule (docs/extensions.md), by name; with
    ``visible`` (a test of queue names), those whose queue it accepts."""
    r = ctx.node.recurring
    out = []
    for name in sorted(r.specs):
        spec = r.specs[name][1]
        if visible is not None and not visible(spec.queue):
            continue
        p = r.progress.get(name)
        out.append((name, spec.queue, spec.paused, p.runs if p else 0, p.skipped if p else 0,
                    r.fired_here.get(name, 0), p.last if p else 0, r.upcoming(name, 1)[0]))
    return out


def schedule_list(ctx, user) -> list:
    """The schedules ``user`` may see (those of the queues it may touch),
    as JSON: what SCHEDULE SHOW says of each, with its next run."""
    r = ctx.node.recurring
    out = []
    for name, queue, paused, runs, skipped, here, last, upcoming in schedule_rows(
            ctx, None if user.all_queues else user.may_queue):
        version, spec = r.specs[name]
        error = r.errors.get(name)
        out.append({"name": text(name), "queue": text(queue), "when": text(spec.describe()),
                    "state": "paused" if paused else "active", "version": version, "runs": runs,
                    "skipped": skipped, "fired_here": here, "last_run": last or None, "next_run": upcoming,
                    "last_error": None if error is None else text(error)})
    return out


def cluster_peers(ctx) -> list:
    """The other nodes in this node's table, in its order, as
    ``(id, address, up, connected, leaving)``: ``address`` is
    b"host:port", ``up`` whether the peer is reachable (not in handshake,
    failing or suspected), ``connected`` whether our link to it is up,
    ``leaving`` whether it leaves the cluster."""
    return [(n.id, b"%s:%d" % (n.host, n.port), n.reachable, n.connected, n.leaving)
            for n in ctx.node.cluster.peers()]


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


def census_row(q) -> tuple:
    """One queue's counters for a peer's cluster view (the fields of
    disque.core.messages.QueueCount): name, length, jobs in and out, ACKs,
    NACKs, jobs moved in and out by federation, pause flags."""
    return q.name, len(q.jobs), q.jobs_in, q.jobs_out, q.acked, q.nacked, q.moved_in, q.moved_out, q.flags & PAUSED_ALL


def _chosen(ctx, visible, wanted: bytes, limit: int) -> tuple:
    """``(total, matching, shown)``: how many queues ``visible`` lets
    through (None: all), how many of those hold ``wanted`` in their name
    (b"": all), and the ``limit`` longest of those (:func:`longest_first`)."""
    mine = _visible_queues(ctx, visible)
    chosen = [q for q in mine if wanted in q.name] if wanted else mine
    return len(mine), len(chosen), heapq.nsmallest(limit, chosen, key=longest_first)


def queue_census(ctx, visible, wanted: bytes, limit: int) -> tuple:
    """``(jobs, queued, total, matching, rows)``: the node's registered and
    queued jobs, and :func:`_chosen`'s counts with the rows
    (:func:`census_row`) of the queues shown: what a peer's cluster view
    asks of this node (disque.node.census)."""
    total, matching, shown = _chosen(ctx, visible, wanted, limit)
    node = ctx.node
    return len(node.jobs), node.job_states()["queued"], total, matching, [census_row(q) for q in shown]


def queue_row(ctx, q, rates) -> dict:
    """One queue as the API lists it; ``rates``: its (in, out, ack, nack)
    rates (disque.http.rates).  ``moved_in`` and ``moved_out`` are the
    jobs federation moved (also counted in ``added`` and ``removed``)."""
    now = ctx.node.now
    rate_in, rate_out, rate_ack, rate_nack = rates
    oldest = q.jobs[0].created_ms() if q.jobs else now
    return {
        "name": text(q.name), "len": len(q.jobs), "age": max(now - oldest, 0) // 1000,
        "added": q.jobs_in, "removed": q.jobs_out, "acked": q.acked, "nacked": q.nacked,
        "moved_in": q.moved_in, "moved_out": q.moved_out, "rate_in": rate_in, "rate_out": rate_out, "rate_ack": rate_ack, "rate_nack": rate_nack,
        "paused": text(PAUSE_NAMES[q.flags & PAUSED_ALL]), "blocked": len(q.waiting) if q.waiting else 0,
        "limit": queue_limit(ctx, q.name),
    }


def queue_limit(ctx, name: bytes):
    """A limited queue's limits (QLIMIT, docs/extensions.md) as JSON, what
    QSTAT appends: the cluster's rate, burst and concurrency, this node's
    jobs in flight and GETJOBs held; None for a queue without limits."""
    limits = ctx.node.qlimits
    lim = limits.by_name.get(name) if limits.by_name else None
    if lim is None:
        return None
    limit = lim.limit
    return {"rate": text(format_rate(limit.rate_milli)) if limit.rate_milli else None, "burst": limit.burst,
            "concurrency": limit.concurrency, "in_flight": limits.inflight.get(name, 0), "held": lim.held}


def queue_list(ctx, user, wanted: bytes, limit: int, rates_of) -> dict:
    """The queues ``user`` may touch (all of them, for most users), as
    QSCAN shows a tenant its own; those whose name holds ``wanted``, the
    ``limit`` longest first; ``rates_of(name)``: a queue's rates."""
    total, matching, shown = _chosen(ctx, None if user.all_queues else user.may_queue, wanted, limit)
    return {"time": ctx.node.now, "total": total, "matching": matching,
            "queues": [queue_row(ctx, q, rates_of(q.name)) for q in shown]}


def queue_jobs(ctx, user, q, count: int) -> list:
    """The oldest ``count`` jobs of ``q`` that ``user`` may see (a dead
    letter that came from another tenant's queue is left out), as JSON
    with a body preview."""
    jobs = q.jobs.head(count)
    if not user.all_queues:
        jobs = [j for j in jobs if user.may_job(j)]
    return [job_json(ctx, j, BODY_PREVIEW) for j in jobs]


def find_queue(ctx, name: bytes):
    """The queue ``name``, or None."""
    return ctx.node.queues.get(name)


def find_job(ctx, job_id: bytes):
    """The job ``job_id`` this node holds, or None."""
    return ctx.node.jobs.get(job_id)
