"""A worker: a Twisted service that runs a handler for every job of some
queues (docs/client.md, "Workers").

    from disque.worker import Worker
    worker = Worker(handle, ["orders"], nodes=["10.0.0.1:7711"], concurrency=8)
    worker.setServiceParent(application)

``handle(job)`` gets a :class:`~disque.client.job.Job`.  It may return a
value, a Deferred or a coroutine; a plain function that blocks (file or
network I/O, CPU work) should run with ``threads=True`` so the reactor
(and the heartbeats of the other jobs) keep going.

For every job:

* **Success** (the handler returns, its Deferred fires): ACKJOB (FASTACK
  with ``fast_ack=True``).
* **Failure** (it raises, its Deferred fails): the error is logged with
  its traceback, and NACK puts the job back in its queue, counting a nack
  (``job.nacks`` on the next delivery): at once, after the job's BACKOFF
  if it has one, or after ``nack_delay`` ms (``NACK ... DELAY``, an
  extension: docs/extensions.md) when the worker is given one.
* **Heartbeat**: a job still running ``first_heartbeat`` seconds after it
  started gets WORKING, which postpones its redelivery by the job's RETRY
  and tells it (WORKING's reply); WORKING is sent again every
  ``heartbeat_fraction`` of that RETRY while the job runs.  The default
  0.5 s is half the smallest RETRY a job can have (1 s), so no job is
  redelivered while its handler runs, and a job faster than that costs no
  WORKING.  A job with RETRY 0 (at most once) gets no heartbeat.

Invariants: at most ``concurrency`` handlers run at once, and the worker
asks GETJOB for no more jobs than it has free slots (``COUNT`` = free
slots), so no job waits in the worker while another could have taken it.
A job is acknowledged only after its handler succeeded.

Stopping (``stopService``, SIGTERM under twistd): no new GETJOB; the one in
flight returns within ``fetch_timeout`` ms and the jobs it brings still
run (one still without an answer a second later, its node gone, is given
up); the service stops when every running job is acknowledged or nacked,
or after ``stop_timeout`` seconds (jobs still running then are left to the
cluster, which delivers them again after their RETRY).

The worker's lines, and its client's, go through the process's disque log
(:data:`disque.io.logs.node_log`): ``notice`` and above unless set otherwise
(``twistd disque-worker --loglevel``, ``node_log.set_level``); in a process
that runs a node too, they follow the node's ``loglevel``, ``logfile`` and
``log-tag``.

Twisted's ``MultiService`` stops its children all at once; an application
holding a node and a worker of that node puts both in a
:class:`StopInOrder`, so the worker finishes its jobs while the node still
serves them (``examples/client/node_and_worker.tac``).
"""

import inspect
from typing import Callable, Dict, Optional, Sequence

from twisted.application import service
from twisted.internet import defer, task, threads as twisted_threads
from twisted.logger import LogLevel

from ..client import errors
from ..client.job import Job
from ..io.logs import logger

FETCH_RETRY_S = 1.0  # pause after a failed GETJOB before the next one


class Worker(service.Service):
    """Runs ``handler`` for the jobs of ``queues`` (see the module docstring).

    ``client`` is a :class:`~disque.client.txclient.DisqueClient` to use;
    without one the worker makes its own from ``nodes`` and
    ``client_options`` (``username``, ``password``, ``tls``, ...) and
    disconnects it when it stops.  ``stats`` counts what happened."""

    log = logger("disque.worker")  # (namespace disque.worker.service.Worker)

    def __init__(self, handler: Callable, queues: Sequence[str], client=None,
                 nodes: Sequence = ("127.0.0.1:7711",), concurrency: int = 1,
                 fetch_timeout: int = 1000, threads: bool = False, fast_ack: bool = False,
                 first_heartbeat: float = 0.5, heartbeat_fraction: float = 0.5,
                 stop_timeout: Optional[float] = None, client_options: Optional[dict] = None,
                 nack_delay: Optional[int] = None, reactor=None):
        if not queues:
            raise ValueError("a worker needs at least one queue")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if fetch_timeout < 1:
            raise ValueError("fetch_timeout must be at least 1 ms (the worker must notice a stop)")
        if not 0 < heartbeat_fraction <= 1:
            raise ValueError("heartbeat_fraction must be in (0, 1]")
        if nack_delay is not None and nack_delay < 0:
            raise ValueError("nack_delay must be at least 0 ms")
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self.handler = handler
        self.queues = list(queues)
        self._own_client = client is None
        if client is None:
            from ..client.txclient import DisqueClient
            client = DisqueClient(nodes, reactor=reactor, **(client_options or {}))
        self.client = client
        self.concurrency = concurrency
        self.fetch_timeout = fetch_timeout
        self.threads = threads
        self.fast_ack = fast_ack
        self.first_heartbeat = first_heartbeat
        self.heartbeat_fraction = heartbeat_fraction
        self.stop_timeout = stop_timeout
        self.nack_delay = nack_delay
        self.stats: Dict[str, int] = dict.fromkeys(
            ("fetched", "succeeded", "failed", "acked", "nacked", "heartbeats", "ack_errors",
             "fetch_errors"), 0)
        self._running: Dict[int, defer.Deferred] = {}   # serial -> the job's Deferred
        self._beats: Dict[int, object] = {}              # serial -> its next heartbeat (IDelayedCall)
        self._serial = 0
        self._slot_freed: Optional[defer.Deferred] = None
        self._loop: Optional[defer.Deferred] = None
        self._fetch: Optional[defer.Deferred] = None   # the GETJOB in flight
        self._stopping = False
        if threads:
            reactor.suggestThreadPoolSize(max(10, concurrency))

    @property
    def running_jobs(self) -> int:
        return len(self._running)

    # -- service -------------------------------------------------------------------

    def startService(self):
        service.Service.startService(self)
        self._stopping = False
        self._loop = self._fetch_loop()
        self._loop.addErrback(lambda f: self.log.failure("disque worker: the fetch loop failed", f))

    def stopService(self):
        service.Service.stopService(self)
        self._stopping = True
        self._wake()
        d = self._drain()
        if self._fetch is not None:
            # The GETJOB in flight answers within fetch_timeout; one stuck in
            # failover (its node is gone) is given up a second later.
            give_up = self.reactor.callLater(self.fetch_timeout / 1000.0 + 1.0, self._cancel_fetch)
            d.addBoth(_cancelled, give_up)
        if self.stop_timeout is not None:
            d.addTimeout(self.stop_timeout, self.reactor)
            d.addErrback(self._stop_timed_out)
        if self._own_client:
            d.addBoth(lambda _: self.client.disconnect())
        return d

    def _cancel_fetch(self):
        if self._fetch is not None:
            self.log.info("disque worker: stopping without waiting for the GETJOB in flight")
            self._fetch.cancel()

    @defer.inlineCallbacks
    def _drain(self):
        if self._loop is not None:
            yield self._loop
        while self._running:
            yield defer.DeferredList(list(self._running.values()))

    def _stop_timed_out(self, failure):
        failure.trap(defer.TimeoutError, defer.CancelledError)
        self.log.warn("disque worker: stopped with {n} job(s) still running; the cluster delivers "
                      "them again after their RETRY", n=len(self._running))

    # -- fetching ------------------------------------------------------------------

    def _wake(self):
        d, self._slot_freed = self._slot_freed, None
        if d is not None:
            d.callback(None)

    @defer.inlineCallbacks
    def _fetch_loop(self):
        while not self._stopping:
            free = self.concurrency - len(self._running)
            if free <= 0:
                self._slot_freed = defer.Deferred()
                yield self._slot_freed
                continue
            self._fetch = self.client.get_jobs(*self.queues, count=free, timeout=self.fetch_timeout)
            try:
                jobs = yield self._fetch
            except defer.CancelledError:
                break
            except errors.DisqueError as e:
                self.stats["fetch_errors"] += 1
                self._fetch_failed(e)
                yield task.deferLater(self.reactor, FETCH_RETRY_S, lambda: None)
                continue
            finally:
                self._fetch = None
            for job in jobs:
                self._start(job)

    def _fetch_failed(self, error: errors.DisqueError):
        """Log a failed GETJOB.  A refusal of access (a wrong password, a
        user whose ACL does not cover the queues) is an error of the
        worker's set-up, logged as one; the worker still tries again, as
        the nodes' users can change while it runs."""
        if isinstance(error, errors.ACCESS_ERRORS):
            self.log.error("disque worker: GETJOB from {queues} refused to user {user} ({error}); "
                           "trying again in {s} s", queues=",".join(self.queues),
                           user=getattr(self.client, "username", None) or "default", error=error,
                           s=FETCH_RETRY_S)
        else:
            self.log.warn("disque worker: GETJOB failed ({error}); trying again in {s} s",
                          error=error, s=FETCH_RETRY_S)

    # -- one job -------------------------------------------------------------------

    def _start(self, job: Job):
        self.stats["fetched"] += 1
        self._serial += 1
        serial = self._serial
        self._beats[serial] = self.reactor.callLater(self.first_heartbeat, self._heartbeat, serial, job)
        d = defer.maybeDeferred(self._call_handler, job)
        d.addCallbacks(self._succeeded, self._failed, callbackArgs=(job,), errbackArgs=(job,))
        d.addBoth(self._finished, serial)
        if not d.called:
            self._running[serial] = d

    def _call_handler(self, job: Job):
        if self.threads:
            return twisted_threads.deferToThread(self.handler, job)
        result = self.handler(job)
        if inspect.iscoroutine(result):
            return defer.Deferred.fromCoroutine(result)
        return result

    def _succeeded(self, _, job: Job):
        self.stats["succeeded"] += 1
        d = self.client.fast_ack(job) if self.fast_ack else self.client.ack(job)
        return d.addCallbacks(self._count, self._not_acknowledged, callbackArgs=("acked",),
                              errbackArgs=(job, "acknowledge", "deliver it again"))

    def _failed(self, failure, job: Job):
        self.stats["failed"] += 1
        self.log.failure("disque worker: handler failed on job {id} of {queue}; NACK",
                         failure, LogLevel.error, id=job.id, queue=job.queue)
        d = self.client.nack(job) if self.nack_delay is None else self.client.nack(job, delay=self.nack_delay)
        return d.addCallbacks(
            self._count, self._not_acknowledged, callbackArgs=("nacked",),
            errbackArgs=(job, "NACK", "deliver it again after its RETRY"))

    def _count(self, _, what: str):
        self.stats[what] += 1

    def _not_acknowledged(self, failure, job: Job, what: str, then: str):
        failure.trap(errors.DisqueError)
        self.stats["ack_errors"] += 1
        self.log.warn("disque worker: could not {what} {id} ({error}); the cluster will {then}",
                      what=what, id=job.id, error=failure.value, then=then)

    def _finished(self, result, serial: int):
        beat = self._beats.pop(serial, None)
        if beat is not None and beat.active():
            beat.cancel()
        self._running.pop(serial, None)
        self._wake()
        return result

    # -- heartbeats ----------------------------------------------------------------

    @defer.inlineCallbacks
    def _heartbeat(self, serial: int, job: Job):
        self._beats.pop(serial, None)
        if serial not in self._running:
            return
        try:
            retry = yield self.client.working(job)
        except (errors.NoJob, errors.TooLate) as e:
            self.log.info("disque worker: no more WORKING for {id}: {error}", id=job.id, error=e)
            return
        except errors.DisqueError as e:
            delay = self.first_heartbeat
            self.log.warn("disque worker: WORKING for {id} failed ({error})", id=job.id, error=e)
        else:
            self.stats["heartbeats"] += 1
            if retry <= 0:
                return
            delay = retry * self.heartbeat_fraction
        if serial in self._running:
            self._beats[serial] = self.reactor.callLater(delay, self._heartbeat, serial, job)


def _cancelled(result, call):
    """Pass ``result`` on, cancelling the delayed ``call`` if still due."""
    if call.active():
        call.cancel()
    return result


class StopInOrder(service.MultiService):
    """A MultiService that stops its children one after the other, the last
    added first, each once the one before has stopped (Twisted's
    MultiService starts every child's stop at once)."""

    @defer.inlineCallbacks
    def stopService(self):
        service.Service.stopService(self)
        for child in reversed(list(self)):
            yield defer.maybeDeferred(child.stopService)
