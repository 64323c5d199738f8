"""The fault suite's checker: pure functions over a recorded history.

A history is what the workload of ``tests/tools/faults.py`` saw, and what the
nodes hold once the drain is over:

``attempted``
    every job body a producer sent in an ADDJOB, recorded *before* sending
    (a job whose reply was lost may exist all the same);
``acked``
    ``{job id: body}`` for every ADDJOB that answered with an ID, i.e. the
    job was replicated to its REPLICATE nodes: the guarantee starts here;
``deliveries``
    ``(job id, body)`` for every job a GETJOB handed to a consumer, in the
    order they were received, repeats included;
``states``
    ``{job id: [state on node 0, state on node 1, ...]}`` for the
    acknowledged jobs not delivered, asked of every node after the drain
    (SHOW's state names; ``-``: the node does not know the job; ``?``: the
    node could not be asked).

Definitions (what the report prints):

* **lost**: an acknowledged job no GETJOB delivered, that no node holds any
  more in a state that could still deliver it (:data:`LIVE`), every node
  having answered: nothing in the cluster can deliver it;
* **held**: an acknowledged job not delivered that a node still holds in a
  live state (or a node could not say) when the drain reached its bound:
  not lost, not drained either -- a failure of its own (the cluster did
  not deliver what it holds), reported with its states;
* **unexpected**: a delivery of a body no producer sent, or of a job whose
  ID and body do not match what its ADDJOB answered;
* **duplicates**: deliveries beyond the first of each job, as a percentage
  of the jobs delivered;
* **unconfirmed**: jobs delivered whose ADDJOB never answered with an ID
  (an error or a lost reply): allowed, not counted as unexpected.

Without ``states`` (None) nothing is known of what the nodes hold, and
every acknowledged job not delivered counts as lost.

:func:`drain_over` is the drain's stop rule, also pure: the drain stops
when the cluster holds no job that could still be delivered and nothing
came for a while, or at its bound -- never merely because deliveries
paused while jobs are still queued somewhere.
"""

from collections import Counter

#: The states in which a node will still deliver a job (queue it, or
#: requeue it after its RETRY): a job in one of them is not lost.
LIVE = ("queued", "active", "wait-repl")
#: A node that could not be asked.
UNKNOWN = "?"


def holds(states):
    """True when ``states`` (one per node) say some node may still deliver
    the job: a live state, or a node that could not be asked."""
    return any(s in LIVE or s == UNKNOWN for s in states)


def check(attempted, acked, deliveries, states=None):
    """The verdict on one history (see the module docstring), as a dict of
    plain values: ``lost`` and ``unexpected`` are sorted lists, ``held``
    maps each job held at the end to its states, the rest are counts;
    ``redelivered`` maps a number of deliveries (2, 3, ...) to how many
    jobs had it."""
    attempted = set(attempted)
    body_to_id = {body: job_id for job_id, body in acked.items()}
    times = Counter()
    unexpected = []
    for job_id, body in deliveries:
        known = acked.get(job_id)
        if body not in attempted or (known is not None and known != body) or \
                body_to_id.get(body, job_id) != job_id:
            unexpected.append((job_id, body))
            continue
        times[job_id] += 1
    delivered = len(times)
    duplicates = sum(times.values()) - delivered
    undelivered = sorted(job_id for job_id in acked if job_id not in times)
    states = states or {}
    held = {job_id: list(states[job_id]) for job_id in undelivered
            if job_id in states and holds(states[job_id])}
    return {
        "attempted": len(attempted),
        "acked": len(acked),
        "deliveries": len(deliveries),
        "delivered": delivered,
        "lost": [job_id for job_id in undelivered if job_id not in held],
        "held": held,
        "unexpected": sorted(set(unexpected)),
        "unconfirmed": sum(1 for job_id in times if job_id not in acked),
        "duplicates": duplicates,
        "duplicate_pct": 100.0 * duplicates / delivered if delivered else 0.0,
        "redelivered": dict(sorted(Counter(n for n in times.values() if n > 1).items())),
    }


def drain_over(elapsed, silent, missing, holding, quiet, bound):
    """Why the drain stops now, or None to go on.

    ``elapsed``: seconds since it began; ``silent``: seconds since the last
    delivery; ``missing``: acknowledged jobs not delivered yet;
    ``holding``: jobs the nodes hold in a live state, summed over the
    nodes, or None when unknown (not asked, or a node could not say).

    * ``"drained"``: every acknowledged job came, nothing came for
      ``quiet`` s and no node holds a job it could still deliver;
    * ``"nothing held"``: the same, but acknowledged jobs are missing: no
      node can deliver them any more (they are lost);
    * ``"bound"``: ``bound`` seconds passed (jobs still held are reported
      as held, not lost).

    A pause in deliveries while a node still holds jobs (a queue no
    consumer happens to poll, federation not asked yet) is not the end."""
    if holding == 0 and silent >= quiet:
        return "drained" if missing == 0 else "nothing held"
    if elapsed >= bound:
        return "bound"
    return None
