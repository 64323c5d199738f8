"""Schedules (docs/extensions.md) on simulated clusters with the fake clock:
every node knows a schedule, each run is fired by one node and added once,
whichever nodes die, pause or restart; a change made during a partition
converges; catch-up policies after the whole cluster was down."""

import hashlib
from collections import deque

import pytest

from disque.core import messages
from disque.core.cronspec import CATCHUP_ALL, CATCHUP_ONE, CATCHUP_SKIP, ScheduleSpec, encode_spec
from disque.core.queue import PAUSED_IN
from disque.core.recurring import BACKUP_STEP_MS, KIND, Recurring, run_key
from tests.support.sim import cluster


def spec(sim, every_ms=1000, queue=b"q", repl=2, catchup=CATCHUP_SKIP, retry=30, ttl=600, paused=False):
    return ScheduleSpec(paused, catchup, every_ms, sim.now, sim.now, b"", b"", queue, b"tick", repl, retry, ttl,
                        0, 0, None)


def add(sim, i, name=b"tick", **kw):
    sim.call(i, "settings.change", KIND, name, encode_spec(spec(sim, **kw)))


@pytest.fixture
def fires(monkeypatch):
    """Every run fired, as (node ID, fire time): a node that adds a run's
    job records it here."""
    log = []
    record = Recurring._record

    def logged(self, name, version, t, fired):
        if fired:
            log.append((self.node.my_id, t))
        record(self, name, version, t, fired)

    monkeypatch.setattr(Recurring, "_record", logged)
    return log


class Consumer:
    """A client on every live node that takes every job of ``q`` and ACKs
    it at once; what it got, by fire time (read from the DEDUP key)."""

    def __init__(self, sim, queue=b"q"):
        self.sim = sim
        self.queue = queue
        self.got = {}  # fire time -> job IDs, one per delivery

    def step(self):
        sim = self.sim
        for i, node in enumerate(sim.nodes):
            if not sim.alive[i]:
                continue
            jobs = sim.call(i, "getjob.get_jobs", [self.queue], 100)
            for job in jobs:
                t = int(job.dedup.rpartition(b"@")[2])
                self.got.setdefault(t, []).append(job.id)
            if jobs:
                sim.call(i, "acks.ack_jobs", [j.id for j in jobs])

    def run(self, ms, step=100):
        end = self.sim.now + ms
        while self.sim.now < end:
            self.sim.advance(step, step=step)
            self.step()


def expected_runs(first, last, every=1000):
    return list(range(first, last + 1, every))


def test_a_schedule_reaches_every_node_and_each_run_is_fired_once(fires):
    sim = cluster(3)
    add(sim, 0)
    assert all(b"tick" in n.recurring.specs for n in sim.nodes)
    start = sim.now
    consumer = Consumer(sim)
    consumer.run(10_000)
    times = sorted(consumer.got)
    assert times == expected_runs(start + 1000, times[-1]) and len(times) >= 9
    assert all(len(ids) == 1 for ids in consumer.got.values())
    assert sorted(t for _, t in fires) == times  # one node fired each run
    assert len({n for n, _ in fires}) == 3  # the turns are spread by the hash
    p = sim.nodes[1].recurring.progress[b"tick"]
    assert p.last == times[-1] and p.runs == len(times)


def test_runs_go_on_with_one_node_left_and_none_is_doubled(fires):
    """Nodes die (their jobs and state gone, as kill -9 without an AOF),
    pause and come back, restart: every run is added once, as long as one
    node is up."""
    sim = cluster(3, node_timeout=2000)
    add(sim, 0, repl=2, retry=5)
    start = sim.now
    consumer = Consumer(sim)
    consumer.run(5_000)
    sim.kill(2)  # killed: the next-ranked node fires its turns
    consumer.run(6_000)
    sim.kill(1)  # down to one node
    consumer.run(6_000)
    sim.restart(2)  # a fresh process: it learns the schedule and the progress from node 0
    consumer.run(6_000)
    assert b"tick" in sim.nodes[2].recurring.specs
    sim.kill(0)  # paused (its state kept), while node 1 is still dead: node 2 alone
    consumer.run(5_000)
    sim.revive(0)  # resumed: it settles before firing anything
    sim.restart(1)
    consumer.run(20_000)  # every run's job delivered (RETRY requeues what died queued)
    end = sim.now - 20_000
    times = expected_runs(start + 1000, end)
    assert [t for t in times if t not in consumer.got] == []
    assert sorted(t for _, t in fires if t <= end) == times  # each run fired by exactly one node
    assert all(len(set(ids)) == 1 for ids in consumer.got.values())  # one job per run


def two_seconds_of_runs(node_timeout):
    """Three nodes, a schedule of REPLICATE 3 and RETRY 5 s run for 2 s:
    ``(sim, start, consumer)``."""
    sim = cluster(3, node_timeout=node_timeout)
    add(sim, 0, repl=3, retry=5)
    start = sim.now
    consumer = Consumer(sim)
    consumer.run(2_000)
    return sim, start, consumer


def a_silent_third_node():
    """:func:`two_seconds_of_runs`, then node 2 silent (killed, its state
    kept) but for 6 s still counted reachable by the others."""
    sim, start, consumer = two_seconds_of_runs(node_timeout=6000)
    sim.kill(2)
    return sim, start, consumer


def test_a_run_whose_copies_do_not_all_come_is_added_once_with_those_it_has(fires):
    """REPLICATE 3 with a node silent but not yet suspected: the run's
    creator cannot confirm its third copy and keeps the run with two; the
    node holding the second copy waits for its creator meanwhile, and
    fires nothing of its own."""
    sim, start, consumer = a_silent_third_node()
    consumer.run(12_000)
    sim.revive(2)
    consumer.run(15_000)
    end = sim.now - 15_000
    times = expected_runs(start + 1000, end)
    assert [t for t in times if t not in consumer.got] == []
    assert all(len(ids) == 1 for t, ids in consumer.got.items() if t <= end)


def test_a_creator_paused_past_the_grace_keeps_its_run_instead_of_voiding_it(fires):
    """REPLICATE 3 with a node silent but not yet suspected, and the run's
    creator paused while it waits for the third copy, past the time after
    which the node holding the second copy takes that copy as proof of the
    run (COPY_GRACE_MS).  Resumed, the creator must not void the job (its
    DELJOB would delete the copy the cluster counted): it keeps the run
    with the copies it has.  Seen in a 600 s soak as a run missing."""
    sim, start, consumer = a_silent_third_node()
    creators = []
    for _ in range(30):
        consumer.run(100)
        creators = [i for i in (0, 1) if sim.nodes[i].recurring._pending]
        if creators:
            break
    (creator,) = creators
    (t,) = sim.nodes[creator].recurring._pending.values()
    holder = 1 - creator
    sim.kill(creator)  # paused while it waits for the third copy
    for _ in range(100):  # the holder's turn, once the copy is past the grace: it takes it as proof
        consumer.run(100)
        if sim.nodes[holder].recurring.progress[b"tick"].last >= t:
            break
    assert sim.nodes[holder].recurring.progress[b"tick"].last >= t
    assert [j for j in sim.nodes[holder].jobs.values() if j.dedup == run_key(b"tick", t)]  # its copy, still
    sim.revive(creator)
    consumer.run(2_000)
    assert [text for i, text in sim.notices if i == creator and "run %d added with fewer copies" % t in text]
    assert sim.nodes[creator].recurring.errors[b"tick"].startswith(b"NOREPL")
    sim.revive(2)
    consumer.run(20_000)
    end = sim.now - 20_000
    times = expected_runs(start + 1000, end)
    assert t in times
    assert [t for t in times if t not in consumer.got] == []
    assert all(len(ids) == 1 for t, ids in consumer.got.items() if t <= end)


def test_a_copy_left_on_a_node_that_was_down_is_not_delivered_again(fires):
    """A run's copy reaches node 2, which dies before its GOTJOB leaves and
    comes back with the copy (its AOF) after the creator's deadline.  The
    creator keeps the run with the copies it has (it used to void it: the
    void never reached node 2, the next turn made the run again, and node
    2's RETRY later queued its copy: the run delivered twice, seen in a
    600 s soak).  Node 2's copy is in the kept job's ``delivered``: the
    ACK reaches it, and its WILLQUEUE is answered with SETACK."""
    sim, start, consumer = two_seconds_of_runs(node_timeout=2000)
    queue = sim.queue

    class Silent(deque):
        """The bus, without node 2's GOTJOBs."""

        def append(self, item):
            if not (item[0] == 2 and type(item[3]) is messages.GotJob):
                super().append(item)

    sim.queue = Silent(queue)
    copy = []
    for _ in range(50):
        consumer.run(100)
        copy = [j for j in sim.nodes[2].jobs.values() if j.dedup and j.delivered[0] != sim.nodes[2].my_id]
        if copy:
            break
    (copy,) = copy
    t = int(copy.dedup.rpartition(b"@")[2])
    sim.kill(2)  # dead with its copy, its GOTJOB never sent
    sim.queue = deque(sim.queue)
    consumer.run(6_000)  # past the creator's deadline, and node 2 flagged failing: the run goes on without it
    sim.revive(2)  # back with the copy, as from its AOF
    consumer.run(20_000)  # past the copy's RETRY (5 s)
    end = sim.now - 20_000
    times = expected_runs(start + 1000, end)
    assert t in times
    assert [t for t in times if t not in consumer.got] == []
    assert {t: ids for t, ids in consumer.got.items() if len(ids) > 1} == {}


def test_a_paused_node_fires_nothing_before_it_has_heard_the_others(fires):
    sim = cluster(3, node_timeout=2000)
    add(sim, 0)
    sim.advance(3000)
    sim.kill(2)  # paused: ticks stop, state kept
    sim.advance(10_000)
    before = len(fires)
    sim.revive(2)
    node = sim.nodes[2]
    node.set_time(sim.now + 100)
    node.tick()  # its first call after the pause: the gap unsettles it
    assert not node.recurring.settled
    sim._drain(2)
    sim.pump()  # the ASKs answered
    sim.advance(200)
    assert node.recurring.settled
    assert [n for n, t in fires[before:] if n == node.my_id and t < sim.now - 5000] == []


def test_a_change_during_a_partition_converges_after_it_heals():
    sim = cluster(3)
    add(sim, 0, every_ms=1000)
    sim.partition({0}, {1, 2})
    sim.advance(500)
    add(sim, 0, every_ms=2000)  # on the minority side
    sim.advance(500)
    add(sim, 2, every_ms=3000)  # later, on the majority side: it wins everywhere
    sim.advance(500)
    assert sim.nodes[0].recurring.specs[b"tick"][1].every_ms == 2000
    assert sim.nodes[1].recurring.specs[b"tick"][1].every_ms == 3000
    sim.heal()
    sim.advance(3000)  # links come back (or the digest repairs it)
    held = [n.recurring.specs[b"tick"] for n in sim.nodes]
    assert all(h == held[0] for h in held) and held[0][1].every_ms == 3000
    assert len({n.settings.catalog.digest() for n in sim.nodes}) == 1


def test_a_deletion_wins_over_an_older_definition_held_elsewhere():
    sim = cluster(3)
    add(sim, 0)
    sim.partition({0, 1}, {2})
    sim.call(0, "settings.change", KIND, b"tick", b"")
    sim.advance(500)
    assert b"tick" not in sim.nodes[0].recurring.specs and b"tick" in sim.nodes[2].recurring.specs
    sim.heal()
    sim.advance(3000)
    assert all(b"tick" not in n.recurring.specs for n in sim.nodes)


@pytest.mark.parametrize("policy", [CATCHUP_SKIP, CATCHUP_ONE, CATCHUP_ALL])
def test_catch_up_after_the_whole_cluster_was_down(policy, fires):
    """20 runs due while every node was down: skip drops them, one fires
    the last, all fires each; but runs due within the late window before
    the nodes came back (every turn, a replication deadline, the node
    timeout: 6 s here) are fired whatever the policy (docs/extensions.md):
    a node cannot tell them from runs a peer was still trying to add."""
    sim = cluster(3, node_timeout=2000)
    anchor = sim.now
    add(sim, 0, catchup=policy, every_ms=1000)
    sim.advance(1500)
    down = sim.now
    for i in range(3):
        sim.kill(i)
    sim.now += 20_000  # nobody up: 20 runs owed
    for i in range(3):
        sim.revive(i)
    consumer = Consumer(sim)
    consumer.run(40_000)
    missed = sorted(t for t in consumer.got if down < t <= down + 20_000)
    runs = range(anchor + 1000, down + 20_001, 1000)
    back = max(n.recurring._since for n in sim.nodes)  # when the nodes came back
    window = [t for t in runs if down < t and t >= back - sim.nodes[0].recurring.late_window(3)]
    assert len(window) == 6
    if policy == CATCHUP_ALL:
        assert len(missed) == 20
    else:  # the window's runs, and for ONE the last run before it
        assert missed[-len(window):] == window
        assert len(missed) - len(window) == (1 if policy == CATCHUP_ONE else 0), missed
    after = [t for t in consumer.got if t > down + 20_000]
    assert len(after) >= 30  # and the runs after the restart go on
    assert all(len(set(ids)) == 1 for ids in consumer.got.values())


def test_the_next_ranked_node_fires_a_dead_nodes_turn_one_step_later(fires):
    sim = cluster(3)  # node_timeout 15 s: nobody suspects the dead node yet
    add(sim, 0)
    sim.advance(2000)
    t = sim.nodes[0].recurring._next[b"tick"]
    nodes = [n.my_id for n in sim.nodes]
    order = sorted(nodes, key=lambda n: hashlib.sha256(b"tick\x00%d\x00%b" % (t, n)).digest())
    first, second = nodes.index(order[0]), nodes.index(order[1])
    assert [sim.nodes[i].recurring._rank(b"tick", t, nodes) for i in (first, second)] == [0, 1]
    sim.advance(t - 200 - sim.now)
    sim.kill(first)
    sim.advance(t + BACKUP_STEP_MS - 100 - sim.now)
    assert [f for f in fires if f[1] == t] == []  # the backup waits its turn
    sim.advance(200)
    assert [f for f in fires if f[1] == t] == [(order[1], t)]
    sim.advance(3000)
    assert [f for f in fires if f[1] == t] == [(order[1], t)]  # and nobody else fires it


def test_turns_go_round_one_node_a_step():
    """Every step of BACKUP_STEP_MS after a run's time belongs to one node,
    by rank, round and round: two nodes never fire a run in one step, not
    even once every node has had its first turn (an attempt voided late)."""
    sim = cluster(3)
    nodes = [n.my_id for n in sim.nodes]
    t = sim.now + 10_000
    owners = []
    for step in range(9):
        at = t + step * BACKUP_STEP_MS + BACKUP_STEP_MS // 2
        mine = [i for i, n in enumerate(sim.nodes) if n.recurring.my_turn(b"tick", t, nodes, at)]
        owners.append(mine)
    assert all(len(m) == 1 for m in owners)
    first = [m[0] for m in owners[:3]]
    assert sorted(first) == [0, 1, 2] and [m[0] for m in owners] == first * 3
    assert not any(n.recurring.my_turn(b"tick", t, nodes, t - 1) for n in sim.nodes)


def test_backups_wait_their_turn_and_stand_down_when_the_run_was_fired():
    sim = cluster(3)
    add(sim, 0)
    sim.advance(3000)
    runs = [m for _, _, m in sim.delivered if type(m) is messages.Settings
            and any(e.kind == b"fired" for e in m.entries)]
    assert runs  # each run's progress sent by its firer
    p = [n.recurring.progress[b"tick"].last for n in sim.nodes]
    assert p[0] == p[1] == p[2]
    assert BACKUP_STEP_MS >= 500


def test_a_run_refused_by_its_queue_is_skipped_not_owed():
    sim = cluster(3)
    add(sim, 0)
    for i in range(3):
        sim.call(i, "queues.set_pause", b"q", PAUSED_IN, True)  # ADDJOB refused
    sim.advance(3500)
    skipped = sum(n.recurring.skipped for n in sim.nodes)
    assert skipped >= 2
    assert all(b"PAUSED" in (n.recurring.errors.get(b"tick") or b"PAUSED") for n in sim.nodes)
    assert all(n.queues.get(b"q") is None or len(n.queues.get(b"q").jobs) == 0 for n in sim.nodes)


def test_the_run_key_names_the_schedule_and_the_time():
    assert run_key(b"tick", 1234) == b"schedule:tick@1234"
