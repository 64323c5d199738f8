"""``/api``: the node's state as JSON, and a few actions (docs/observability.md).

Reads (GET)::

    /api/node               the node: version, uptime, clients, jobs by state,
                            memory, persistence (with progress), latency
    /api/nodes              the cluster as this node sees it
    /api/cluster            the queues summed over the cluster, each node's part
                            and whether its counts are in (disque.http.cluster)
    /api/queues             queues, longest first (?filter=text&limit=n)
    /api/queues/<name>      one queue and its oldest jobs (?count=n)
    /api/jobs/<id>          one job, SHOW's fields
    /api/rates              node-wide rates, one sample a second, 5 minutes
                            (each over the last 10 s, as the queues' rates)
    /api/schedules          the schedules (docs/extensions.md), by name

Actions (POST, with the header ``X-Disque-Action: 1``)::

    /api/queues/<name>/pause   {"state": "in"|"out"|"all"|"none", "bcast": bool}: PAUSE
    /api/jobs/<id>/requeue     ENQUEUE
    /api/jobs/<id>/delete      ACKJOB: gone from every node holding a copy

Every request runs as its user (``request.acl_user``, set by
disque.http.access).  A read is checked as the RESP command it stands for
(INFO for the node, the cluster and the rates; QSCAN for the queue list,
INFO and QSCAN for the cluster's queues,
QPEEK for a queue, SHOW for a job, SCHEDULE LIST for the schedules: @inspect, and the queue's or job's
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

import json

from twisted.internet import defer
from twisted.web import resource, server

from . import cluster
from ..commands import views
from ..commands.views import text as _text
from ..core.jobid import is_valid as is_valid_id
from ..io.logs import logger
from .dispatch import http_error, refused, run

log = logger("disque")

PEEK_DEFAULT = 50
PEEK_MAX = 1000
QUEUES_DEFAULT = 1000
CLUSTER_DEFAULT = 200  # queues in /api/cluster (the longest of each node, summed)
CLUSTER_MAX = 1000
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
        if isinstance(result, defer.Deferred):  # /api/cluster: the peers answer over the bus
            _answer_later(request, result)
            return server.NOT_DONE_YET
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
        ctx = runtime.ctx
        if path in ([b"node"], [b"nodes"], [b"rates"]):
            self._may(request, INFO)
            if path == [b"node"]:
                summary = views.node_summary(ctx)
                summary["actions"] = all(user.may_run(name, (name,)) for name in ACTION_COMMANDS)
                return summary
            if path == [b"nodes"]:
                return views.cluster_nodes(ctx)
            return {"interval": 1, "window": self.rates.window, "samples": list(self.rates.samples)}
        if path == [b"cluster"]:
            self._may(request, INFO)
            self._may(request, [b"QSCAN", b"0"])
            return self._cluster(request, user)
        if path == [b"queues"]:
            self._may(request, [b"QSCAN", b"0"])
            return views.queue_list(ctx, user, _arg(request, b"filter", "").encode("utf-8"),
                                    _int_arg(request, b"limit", QUEUES_DEFAULT, 0, 1 << 30), self.rates.of_queue)
        if len(path) == 2 and path[0] == b"queues":
            self._may(request, [b"QPEEK", path[1], b"0"])
            count = _int_arg(request, b"count", PEEK_DEFAULT, 0, PEEK_MAX)
            q = self._queue(path[1])
            return {"queue": self._queue_row(q), "jobs": views.queue_jobs(ctx, user, q, count)}
        if path == [b"schedules"]:
            self._may(request, [b"SCHEDULE", b"LIST"])
            return {"time": ctx.node.now, "schedules": views.schedule_list(ctx, user)}
        if len(path) == 2 and path[0] == b"jobs":
            _valid_id(path[1])
            self._may(request, [b"SHOW", path[1]])
            return views.job_json(ctx, self._job(path[1]))
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

    # -- reads: the views of disque.commands.views, after the ACL check ------------

    def _cluster(self, request, user):
        """A Deferred of the ``/api/cluster`` reply: the peers' counts over
        the bus (disque.node.census), then this node's."""
        runtime = self.runtime
        wanted = _arg(request, b"filter", "").encode("utf-8")
        limit = _int_arg(request, b"limit", CLUSTER_DEFAULT, 0, CLUSTER_MAX)
        census = runtime.census

        def answered(peers):
            runtime.set_time()
            mine = census.counts(0, None if user.all_queues else user.may_queue, wanted, limit)
            return cluster.view(runtime.ctx, mine, peers, limit)

        return census.gather(user, wanted, limit).addCallback(answered)

    def _queue_row(self, q):
        return views.queue_row(self.runtime.ctx, q, self.rates.of_queue(q.name))

    def _queue(self, name: bytes):
        q = views.find_queue(self.runtime.ctx, name)
        if q is None:
            raise ApiError(404, "-ERR no such queue on this node")
        return q

    def _job(self, job_id: bytes):
        job = views.find_job(self.runtime.ctx, job_id)
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
        q = views.find_queue(self.runtime.ctx, name)
        return {"queue": self._queue_row(q) if q is not None else None, "paused": _text(now)}

    def _job_command(self, request, command: bytes, job_id: bytes) -> int:
        """``command <job_id>`` (ENQUEUE, ACKJOB): how many jobs it counted.
        404 for a job this node does not know, without running it, for a
        user who may touch every queue (for one limited to some, the
        command's -NOPERM: it cannot tell whose the job is); not while
        the AOF loads, where the command answers -LOADING."""
        _valid_id(job_id)
        runtime = self.runtime
        if request.acl_user.all_queues and not runtime.loading and views.find_job(runtime.ctx, job_id) is None:
            raise ApiError(404, NOJOB)
        return int(self._command(request, [command, job_id])[1:])


def _answer_later(request, deferred) -> None:
    """Answer ``request`` with the JSON ``deferred`` fires with (500 and
    the error if it fails), unless the client left meanwhile."""
    gone = []
    request.notifyFinish().addErrback(gone.append)

    def write(value):
        if not gone:
            body = json.dumps(value, separators=(",", ":")).encode()
            request.setHeader(b"content-length", b"%d" % len(body))
            request.write(body)
            request.finish()

    def failed(failure):
        log.failure("The cluster view failed", failure)
        request.setResponseCode(500)
        write({"error": "-ERR %s" % failure.getErrorMessage()})

    deferred.addCallbacks(write, failed)


def _valid_id(job_id: bytes) -> None:
    if not is_valid_id(job_id):
        raise ApiError(400, "-BADID Invalid Job ID format.")
