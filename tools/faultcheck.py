"""The fault suite's checker: a pure function over a recorded history.

A history is what the workload of ``tools/faults.py`` saw, nothing the
nodes said about themselves:

``attempted``
    every job body a producer sent in an ADDJOB, recorded *before* sending
    (a job whose reply was lost may exist all the same);
``acked``
    ``{job id: body}`` for every ADDJOB that answered with an ID, i.e. the
    job was replicated to its REPLICATE nodes: the guarantee starts here;
``deliveries``
    ``(job id, body)`` for every job a GETJOB handed to a consumer, in the
    order they were received, repeats included.

Definitions (what the report prints):

* **lost**: an acknowledged job no GETJOB ever delivered (checked after the
  faults are healed and the queues drained);
* **unexpected**: a delivery of a body no producer sent, or of a job whose
  ID and body do not match what its ADDJOB answered;
* **duplicates**: deliveries beyond the first of each job, as a percentage
  of the jobs delivered;
* **unconfirmed**: jobs delivered whose ADDJOB never answered with an ID
  (an error or a lost reply): allowed, not counted as unexpected.
"""

from collections import Counter


def check(attempted, acked, deliveries):
    """The verdict on one history (see the module docstring), as a dict of
    plain values: ``lost`` and ``unexpected`` are sorted lists, the rest
    counts; ``redelivered`` maps a number of deliveries (2, 3, ...) to how
    many jobs had it."""
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
    return {
        "attempted": len(attempted),
        "acked": len(acked),
        "deliveries": len(deliveries),
        "delivered": delivered,
        "lost": sorted(job_id for job_id in acked if job_id not in times),
        "unexpected": sorted(set(unexpected)),
        "unconfirmed": sum(1 for job_id in times if job_id not in acked),
        "duplicates": duplicates,
        "duplicate_pct": 100.0 * duplicates / delivered if delivered else 0.0,
        "redelivered": dict(sorted(Counter(n for n in times.values() if n > 1).items())),
    }
