"""``/api``: the node's state as JSON, and a few actions (docs/observability.md).

Reads (GET)::

    /api/node               the node: version, uptime, clients, jobs by state,
                            memory, persistence (with progress), latency
    /api/nodes              the cluster as this node sees it
    /api/queues             queues, longest first (?filter=text&limit=n)
    /api/queues/<name>      one queue and its oldest jobs (?count=n)
    /api/jobs/<id>          one job, SHOW's fields
    /api/rates              node-wide rates, one sample a second, 5 minutes

Actions (POST, with the header ``X-Disque-Action: 1``)::

    /api/queues/<name>/pause   {"state": "in"|"out"|"all"|"none", "bcast": bool}: PAUSE
    /api/jobs/<id>/requeue     ENQUEUE
    /api/jobs/<id>/delete      ACKJOB: gone from every node holding a copy

Every request runs as its user (``request.acl_user``, set by
disque.http.access).  A read is checked as the RESP command it stands for
(INFO for the node, the cluster and the rates; QSCAN for the queue list,
QPEEK for a queue, SHOW for a job: @inspect, and the queue's or job's
patterns), so it shows a user what that command would: the queue list
holds only the queues it may touch, another tenant's queue or job answers
403 ``-NOPERM`` (a job this node does not know too, for a user limited to
some queues: as SHOW, it cannot tell whose it is), never its body.  An
action *is* its RESP command, run through the node's dispatcher as the
user (disque.http.dispatch): the ACL check, MONITOR, the slow log and the
stats see it, and its reply becomes the answer (-NOPERM 403, -LOADING and
-MISCONF 503, other errors 400).  The header is a guard against
cross-site requests: a page of another origin cannot send it without the
browser asking this node first (CORS), which the node never allows.

Errors are JSON too: ``{"error": "-ERR ..."}`` with the original's texts
where a command says the same thing, and the HTTP status that fits.

Names and bodies are bytes: they are given as UTF-8 text (invalid bytes
replaced); a body that is not UTF-8 comes as ``body_base64`` instead.
"""

import base64
import heapq
import json

from twisted.web import resource

from ..commands.jobs import job_fields
from ..core.jobid import is_valid as is_valid_id
from ..core.queue import PAUSE_NAMES, PAUSED_ALL
from .. import DISQUE_VERSION
from .dispatch import http_error, refused, run
from .metrics import longest_first

PEEK_DEFAULT = 50
PEEK_MAX = 1000
QUEUES_DEFAULT = 1000
BODY_PREVIEW = 1024  # bytes of each body in a queue's job list
PAUSE_STATES = ("none", "in", "out", "all")
#: The commands the actions are: the dashboard offers them to a user who
#: may run all three.
ACTION_COMMANDS = (b"pause", b"enqueue", b"ackjob")
INFO = [b"INFO"]
NOJOB = "-NOJOB Job not known in the context of this node."


class ApiError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _arg(request, name: bytes, default=None):
    values = request.args.get(name)
    return _text(values[0]) if values else default


def _int_arg(request, name: bytes, default: int, lo: int, hi: int) -> int:
    raw = _arg(request, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "-ERR %s is not an integer" % name.decode()) from None
    return max(lo, min(value, hi))


def job_json(node, job, preview: int = 0) -> dict:
    """SHOW's fields as JSON (``preview``: at most that many body bytes)."""
    out = {}
    for name, value in job_fields(node, job):
        key = name.decode()
        if isinstance(value, bytes) and key != "body":
            value = _text(value)
        elif isinstance(value, tuple):
            value = [v if isinstance(v, int) else _text(v) for v in value]
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


ACTIONS = (b"pause", b"requeue", b"delete")


def _route(postpath):
    """The request's path as a list: ``[kind, name, action]`` at most.
    A job ID may hold ``/`` (base64), percent-encoded or not: everything
    after ``jobs/`` is the ID, but a last segment naming an action."""
    if len(postpath) >= 2 and postpath[0] == b"jobs":
        rest = postpath[1:]
        action = [rest.pop()] if len(rest) > 1 and rest[-1] in ACTIONS else []
        return [b"jobs", b"/".join(rest)] + action
    return [p for p in postpath if p]


class Api(resource.Resource):
    """The ``/api`` tree (a leaf: it routes ``postpath`` itself)."""

    isLeaf = True

    def __init__(self, runtime, rates):
        super().__init__()
        self.runtime = runtime
        self.rates = rates

    # -- dispatch ------------------------------------------------------------

    def render(self, request):
        request.setHeader(b"content-type", b"application/json")
        path = _route(request.postpath)
        method = request.method
        try:
            if method in (b"GET", b"HEAD"):
                result = self._read(request, path)
            elif method == b"POST":
                result = self._act(request, path)
            else:
                raise ApiError(405, "-ERR method not allowed")
        except ApiError as e:
            request.setResponseCode(e.status)
            result = {"error": e.text}
        return json.dumps(result, separators=(",", ":")).encode()

    def _may(self, request, argv):
        """Raise 403 with the -NOPERM text unless the request's user may run
        ``argv``, the RESP command the read stands for."""
        no = refused(self.runtime, request, argv)
        if no is not None:
            raise ApiError(*http_error(no))

    def _read(self, request, path):
        runtime = self.runtime
        runtime.set_time()
        user = request.acl_user
        if path in ([b"node"], [b"nodes"], [b"rates"]):
            self._may(request, INFO)
            if path == [b"node"]:
                return self.node_info(user)
            if path == [b"nodes"]:
                return self.nodes()
            return {"interval": 1, "samples": list(self.rates.samples)}
        if path == [b"queues"]:
            self._may(request, [b"QSCAN", b"0"])
            return self.queues(user, _arg(request, b"filter", ""),
                               _int_arg(request, b"limit", QUEUES_DEFAULT, 0, 1 << 30))
        if len(path) == 2 and path[0] == b"queues":
            self._may(request, [b"QPEEK", path[1], b"0"])
            return self.queue(user, path[1], _int_arg(request, b"count", PEEK_DEFAULT, 0, PEEK_MAX))
        if len(path) == 2 and path[0] == b"jobs":
            _valid_id(path[1])
            self._may(request, [b"SHOW", path[1]])
            return job_json(runtime.node, self._job(path[1]))
        raise ApiError(404, "-ERR no such resource")

    def _act(self, request, path):
        if request.getHeader(b"x-disque-action") != b"1":
            raise ApiError(403, "-ERR actions need the header X-Disque-Action: 1")
        if len(path) != 3 or path[0] not in (b"queues", b"jobs"):
            raise ApiError(404, "-ERR no such action")
        try:
            body = json.loads(request.content.read() or b"{}")
        except ValueError:
            raise ApiError(400, "-ERR the request body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "-ERR the request body must be a JSON object")
        if path[0] == b"queues" and path[2] == b"pause":
            return self.pause(request, path[1], body)
        if path[0] == b"jobs" and path[2] == b"requeue":
            return {"requeued": self._job_command(request, b"ENQUEUE", path[1])}
        if path[0] == b"jobs" and path[2] == b"delete":
            return {"deleted": self._job_command(request, b"ACKJOB", path[1])}
        raise ApiError(404, "-ERR no such action")

    def _command(self, request, argv) -> bytes:
        """Run ``argv`` as the request's user (disque.http.dispatch); its
        reply, or ApiError for an error reply."""
        reply = run(self.runtime, request, argv)
        error = http_error(reply)
        if error is not None:
            raise ApiError(*error)
        return reply

    # -- reads ---------------------------------------------------------------

    def node_info(self, user):
        runtime = self.runtime
        node = runtime.node
        process = runtime.process_info()
        used, rss, _ = runtime.memory()
        latency = node.latency
        return {
            "id": _text(node.my_id), "version": DISQUE_VERSION, "runtime": process["runtime"],
            "uptime": process["uptime"], "time": node.now,
            "clients": {"connected": len(runtime.ctx.clients), "blocked": len(node.getjob)},
            "jobs": dict(total=len(node.jobs), **{k.replace("-", "_"): v for k, v in node.job_states().items()}),
            "queues": len(node.queues),
            "memory": {"used": used, "max": runtime.config["maxmemory"], "rss": rss},
            "persistence": dict(runtime.persistence_info()),
            "latency": {name: {"count": getattr(latency, name).count, "p50": getattr(latency, name).quantile(0.5),
                               "p99": getattr(latency, name).quantile(0.99)} for name, _ in latency.NAMES},
            "actions": all(user.may_run(name, (name,)) for name in ACTION_COMMANDS),
        }

    def nodes(self):
        cluster = self.runtime.node.cluster
        me = cluster.my_id
        rows = []
        for n in cluster.nodes.values():
            myself = n is cluster.myself
            flags = [b"myself"] + ([b"leaving"] if cluster.leaving else []) if myself else n.flag_names()
            rows.append({
                "id": _text(n.id), "address": "%s:%d" % (_text(n.host), n.port), "myself": myself,
                "up": True if myself else bool(n.reachable), "connected": True if myself else bool(n.connected),
                "leaving": bool(cluster.leaving if myself else n.leaving),
                "flags": _text(b",".join(flags) or b"noflags"),
            })
        rows.sort(key=lambda r: (not r["myself"], r["address"]))
        return {"myself": _text(me), "nodes": rows}

    def _queue_row(self, q):
        now = self.runtime.node.now
        rate_in, rate_out, rate_ack, rate_nack = self.rates.of_queue(q.name)
        oldest = q.jobs[0].created_ms() if q.jobs else now
        return {
            "name": _text(q.name), "len": len(q.jobs), "age": max(now - oldest, 0) // 1000,
            "added": q.jobs_in, "removed": q.jobs_out, "acked": q.acked, "nacked": q.nacked,
            "rate_in": rate_in, "rate_out": rate_out, "rate_ack": rate_ack, "rate_nack": rate_nack,
            "paused": _text(PAUSE_NAMES[q.flags & PAUSED_ALL]), "blocked": len(q.waiting) if q.waiting else 0,
        }

    def queues(self, user, text: str, limit: int):
        """The queues ``user`` may touch (all of them, for most users), as
        QSCAN shows a tenant its own."""
        node = self.runtime.node
        wanted = text.encode("utf-8")
        mine = list(node.queues.values()) if user.all_queues else [
            q for q in node.queues.values() if user.may_queue(q.name)]
        chosen = [q for q in mine if wanted in q.name] if wanted else mine
        shown = heapq.nsmallest(limit, chosen, key=longest_first)
        return {"time": node.now, "total": len(mine), "matching": len(chosen),
                "queues": [self._queue_row(q) for q in shown]}

    def _queue(self, name: bytes):
        q = self.runtime.node.queues.get(name)
        if q is None:
            raise ApiError(404, "-ERR no such queue on this node")
        return q

    def queue(self, user, name: bytes, count: int):
        """A queue and its oldest jobs: those ``user`` may see (a dead
        letter that came from another tenant's queue is left out)."""
        q = self._queue(name)
        node = self.runtime.node
        jobs = q.jobs.head(count)
        if not user.all_queues:
            jobs = [j for j in jobs if user.may_job(j)]
        return {"queue": self._queue_row(q), "jobs": [job_json(node, j, BODY_PREVIEW) for j in jobs]}

    def _job(self, job_id: bytes):
        job = self.runtime.node.jobs.get(job_id)
        if job is None:
            raise ApiError(404, NOJOB)
        return job

    # -- actions -------------------------------------------------------------

    def pause(self, request, name: bytes, body: dict):
        """PAUSE <queue> <state> [BCAST]."""
        state = body.get("state")
        if state not in PAUSE_STATES:
            raise ApiError(400, "-ERR state must be one of none, in, out, all")
        argv = [b"PAUSE", name, state.encode()] + ([b"BCAST"] if body.get("bcast") else [])
        now = self._command(request, argv)[1:].rstrip(b"\r\n")
        q = self.runtime.node.queues.get(name)
        return {"queue": self._queue_row(q) if q is not None else None, "paused": _text(now)}

    def _job_command(self, request, command: bytes, job_id: bytes) -> int:
        """``command <job_id>`` (ENQUEUE, ACKJOB): how many jobs it counted.
        404 for a job this node does not know, without running it, for a
        user who may touch every queue (for one limited to some, the
        command's -NOPERM: it cannot tell whose the job is); not while
        the AOF loads, where the command answers -LOADING."""
        _valid_id(job_id)
        runtime = self.runtime
        if request.acl_user.all_queues and not runtime.loading and job_id not in runtime.node.jobs:
            raise ApiError(404, NOJOB)
        return int(self._command(request, [command, job_id])[1:])


def _valid_id(job_id: bytes) -> None:
    if not is_valid_id(job_id):
        raise ApiError(400, "-BADID Invalid Job ID format.")
