"""Pure cores wired in memory (``disque.testing.SimCluster``): a joined
cluster, and where its jobs and messages are."""

from disque.core.job import QUEUED
from disque.testing import SimCluster


def cluster(n, **kw):
    """``n`` cores, chain-MEETed and settled (3 s of simulated time)."""
    sim = SimCluster(n, **kw)
    sim.chain_meet()
    sim.settle(3000)
    return sim


def holders(sim, job_id):
    """The live nodes holding ``job_id``."""
    return [i for i, n in enumerate(sim.nodes) if sim.alive[i] and job_id in n.jobs]


def queued_on(sim, job_id):
    """The live nodes where ``job_id`` is queued."""
    return [i for i, n in enumerate(sim.nodes)
            if sim.alive[i] and job_id in n.jobs and n.jobs.get(job_id).state == QUEUED]


def sent(sim, kind):
    """Every message of type ``kind`` delivered so far: (from, to, message)."""
    return [(a, b, m) for a, b, m in sim.delivered if type(m) is kind]


def replies(sim, handle):
    """The replies given so far to the client ``handle`` stands for."""
    return [p for _, h, p in sim.replies if h is handle]
