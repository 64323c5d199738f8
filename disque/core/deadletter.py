"""Dead letters: ``ADDJOB ... MAXDELIVERIES n [DEADLETTER queue]`` (an
extension of this project, docs/extensions.md; the original has none).

A job that would be queued again for its (n+1)-th delivery (its NACKs plus
its additional deliveries reach ``n``) is *moved* to its dead-letter queue
instead (``<queue>:dead`` unless DEADLETTER names one): the node that
decides creates the dead letter and acknowledges the original, whose SETACK
then reaches every copy (the ordinary ACK machinery: the original is never
delivered again anywhere).

The specification's objection to dead letters ("Dead letter queue" in
``seeds/disque-readme.txt``) is that several nodes holding copies could
decide at once and duplicate the job.  The answer here:

* the dead letter's ID is derived from the original's (:func:`dead_letter_id`),
  it goes to the nodes of the original's copies, and its DEDUP key is the
  original's ID: nodes deciding at the same moment create *the same* job,
  and a node that already holds it (or consumed it within the dedup window)
  adds nothing;
* each deciding node queues its copy and sends QUEUED, so when two did, the
  one with the lower node ID dequeues it (the original's tie break for a job
  queued twice): in a healthy cluster it is delivered once, and under a
  partition no more often than the original's own requeue would deliver it;
* it is TTL-bound: the dead letter expires when the original would have
  (same ``etime``), so an in-memory queue never fills with dead jobs.

A dead letter keeps the original's counters, body, REPLICATE and RETRY
(at-least-once in the dead-letter queue too), and options with
``dead_from`` and ``dead_reason`` set; it is never dead-lettered again.
Operators look at dead letters with QPEEK, SHOW and JSCAN, and put them
back with REVIVE (:meth:`DeadLetters.revive`).
"""

import hashlib
from binascii import b2a_base64

from .job import ACKED, ACTIVE, Job
from . import messages
from .options import REASON_MAX_DELIVERIES


def dead_letter_id(job_id: bytes) -> bytes:
    """The dead letter's ID: the original's node part and TTL suffix (so its
    TTL and delivery guarantee read from it as from any ID), with 144 bits
    of a hash of the original ID: the same on every node."""
    digest = hashlib.sha1(b"dead-letter:" + job_id).digest()[:18]
    return job_id[:11] + b2a_base64(digest, newline=False) + job_id[35:]


def is_due(job) -> bool:
    """True when ``job``, a job with options (callers check
    ``job.extra.opts`` first: jobs without any never get here), whose
    counters count the requeue being decided, has used its deliveries: the
    first one plus one per NACK or additional delivery would pass
    MAXDELIVERIES."""
    opts = job.extra.opts
    return (opts.max_deliveries != 0 and not opts.dead_from
            and 1 + job.nacks + job.deliv > opts.max_deliveries)


class DeadLetters:
    def __init__(self, node):
        self.node = node
        self.moved = 0  # jobs this node moved to a dead-letter queue

    def move(self, job, reason: bytes = REASON_MAX_DELIVERIES) -> None:
        """Replace the requeue of the active ``job`` by its dead letter:
        create it here (unless this node has it or had it), send it to the
        original's copies, queue it, and acknowledge the original."""
        node = self.node
        jobs = node.jobs
        queues = node.queues
        cluster = node.cluster
        opts = job.extra.opts
        dlq = opts.deadletter_queue(job.queue)
        dead_id = dead_letter_id(job.id)
        if jobs.get(dead_id) is None and jobs.dedup.find(dlq, job.id, node.now) is None:
            dead_opts = opts._replace(dead_from=job.queue, dead_reason=reason)
            defaults = queues.job_defaults(dlq, job.repl, job.retry, dead_opts)
            dead = Job(dead_id, defaults.queue, job.body, ACTIVE, job.repl, node.addjob.new_ctime(),
                       job.etime, 0, job.retry, 1, defaults)
            dead.nacks = job.nacks
            dead.deliv = job.deliv
            dead.delivered = job.delivered if node.my_id in job.delivered else (*job.delivered, node.my_id)
            dead.dedup = job.id
            jobs.register(dead)
            cluster.send_to_copies(dead, messages.ReplJob(jobs.record(dead)))
            queues.enqueue_first(dead)
            # Another node may have decided too: QUEUED crossing theirs
            # leaves one of the two queued (the lower ID dequeues).
            cluster.send_to_copies(dead, messages.Queued(dead.id, messages.COUNT_NONE))
            jobs.log_added(dead)
        self.moved += 1
        queues.queue_for(job.queue).dead += 1
        acks = node.acks
        acks.acknowledge(job)
        acks.try_gc(job)

    def revive(self, dead_id: bytes):
        """REVIVE: put dead letter ``dead_id`` (known here) back in the
        queue it came from as a new job (its body, REPLICATE, RETRY, options
        and the TTL it has left; fresh counters; copies made in the
        background, as ADDJOB ... ASYNC), then acknowledge the dead letter.
        The new job's DEDUP key is the dead letter's ID, so a REVIVE
        repeated on this node answers the same job.  Returns the new ID, or
        None for an ID that is no dead letter here or whose TTL is spent."""
        node = self.node
        dead = node.jobs.get(dead_id)
        if dead is None or dead.state == ACKED or dead.opts is None or not dead.opts.dead_from:
            return None
        opts = dead.opts
        addjob = node.addjob
        job = addjob.find_dedup(opts.dead_from, dead_id)
        if job is None:
            ttl = (dead.etime - node.now) // 1000
            if ttl <= 0:
                return None
            job = addjob.add(opts.dead_from, dead.body, dead.repl, 0, dead.retry, ttl, 0, True, dead_id,
                             opts._replace(dead_from=b"", dead_reason=b""))  # may raise NOREPL, PAUSED
        node.acks.ack_jobs((dead_id,))
        return job if type(job) is bytes else job.id
