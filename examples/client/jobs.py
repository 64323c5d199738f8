"""Handlers for ``twistd disque-worker`` (run from this directory):

    twistd -n disque-worker --handler jobs:handle_order --queues orders --concurrency 4

A handler gets a :class:`disque.client.Job`.  Returning means done (the
worker acknowledges the job); raising means failed (the worker logs it and
NACKs the job, so it comes back with ``job.nacks`` one higher).  A handler
may return a Deferred or be ``async def``; one that blocks should run with
``--threads``.
"""

from twisted.internet import reactor, task
from twisted.logger import Logger

log = Logger()


def handle_order(job):
    if job.nacks and job.nacks >= 3:
        log.warn("giving up on {id} after {n} failures", id=job.id, n=job.nacks)
        return None  # acknowledged: it will not come back
    log.info("order {id}: {body}", id=job.id, body=job.body.decode())
    return task.deferLater(reactor, 0.1, lambda: None)  # some asynchronous work
