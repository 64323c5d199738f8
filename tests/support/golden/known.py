"""Known differences: the one table of replies of ours that differ from the
original's, with the reason and, where the difference allows one, the check
that pins it.

Block keys are "file: command (title)", "file: title", "file: [tag] command"
or "file: command" (tried in that order, :func:`known_key`); "INFO field
<name>" keys are INFO fields, wherever INFO shows them.  An entry may name a
check (:data:`KNOWN_CHECKS`, the signature of a normalizer): the reply must
then differ from the original in exactly the described way.  An entry whose
block matches the original again makes the test fail, so the table cannot go
stale, except for the entries of :data:`RACES`.

Reasons say what kind of difference it is: deliberate, "timing:" (a race the
original's C nodes win against the client's next command and our Python
nodes may lose; listed in RACES, so the block may also match) or "BUG:" (our
server is wrong; the server code is fixed elsewhere, the entry's check pins
our current reply).
"""

import re

from .normalize import ACKED_GC_WITHIN_MS, check_cluster_info, check_job_record, check_qstat
from .originals import FEDERATED_JOB, JOB_ID_FULL, ORIGINAL_CLUSTER
from .resp import field, ids, is_record, set_field, split_requests


KNOWN_DIFFERENCES = {
    # -- deliberate ---------------------------------------------------------
    "INFO field gcc_version":
        "the GCC that built the Python interpreter, 0.0.0 if not GCC (format checked: x.y.z)",
    "INFO field package_version":
        "ours only: the version of this package (disque.__version__); disque_version stays the "
        "protocol's, 1.0-rc1, as the original reports it",
    "INFO field runtime":
        "ours only: the Python implementation and version running the node",
    "INFO field auth_failures":
        "ours only: wrong AUTH passwords since the start (the original counts none)",
    "INFO field auth_delayed":
        "ours only: wrong AUTH passwords answered late, their source having failed too often in a row",
    "INFO field auth_refused":
        "ours only: AUTHs refused unchecked, their source having failed too often within a minute",
    "INFO field bus_auth_failures":
        "ours only: failed cluster-password handshakes (the original has no cluster password)",
    "INFO field mem_allocator":
        "Python's allocator, not jemalloc-4.0.3 (checked: non-empty)",
    "admin.md: COMMAND COUNT":
        "ours has the original's commands, REVIVE, SCHEDULE and QLIMIT (the commands of this project's extensions, "
        "docs/extensions.md; every other extension is an option of an original command) and ACL "
        "(users, docs/security.md): four more (checked: the original's count + 4)",
    "errors.md: AUTH a b":
        "AUTH takes a user name too, as in Redis 6 (AUTH username password: users, docs/security.md): "
        "two arguments are a user and its password, and no user a has password b "
        "(checked: Redis 6's -WRONGPASS)",
    "admin.md: DEBUG STRUCTSIZE":
        "C struct sizes of the original have no Python equivalent: ours are the "
        "sizes the memory estimate charges (checked: a bulk 'bits:64 job:<n> ...' line)",
    # -- timing: a race the original's C nodes win against the client's
    # next command and our Python nodes may lose.  Both outcomes pass (see
    # RACES); the check pins the intermediate state we may show.
    "cluster.md: right after ACKJOB on A":
        "timing: the GC of an acked job (SETACK to B and C, their GOTACKs, DELJOB: three bus "
        "hops) may still be running when the client's next command arrives; the original "
        "had already deleted the job (checked: $-1, or the job acked, nodes-confirmed a "
        "subset of nodes-delivered)",
    "cluster.md: on B right after ACKJOB on A":
        "timing: as for A, B may not have received A's SETACK / DELJOB yet (checked: $-1, "
        "or the job acked, or not yet acked)",
    "cluster.md: SHOW after ACKJOB of unknown ID (cluster)":
        "timing: the dummy ACK goes once B and C both answered A's broadcast SETACK (two "
        "bus hops); it may still be there (checked: $-1, or the dummy: that ID, acked, no "
        "queue, no nodes-delivered, nodes-confirmed A)",
    "cluster.md: on B after FASTACK on A":
        "timing: A's DELJOB to B (one bus hop) may arrive after the client's SHOW on B, "
        "which our B may then serve first (checked: $-1, or the job not acked)",
    "cluster.md: CLUSTER INFO (immediately after MEET)":
        "timing: our CLUSTER MEET connects at once (the original waits for its next 100 ms "
        "cron), so a handshake may already be complete when the next command arrives "
        "(checked: 3 known nodes, cluster_size = 1 + cluster_reachable_nodes, at most 3)",
    "cluster.md: [B:7913] PAUSE pbq state":
        "timing: A's PAUSE ... bcast reaches B (one bus hop) after the client's next command "
        "on B, which our B then serves first (checked: the state the broadcast set, or the "
        "one before it)",
    "cluster.md: [B:7913] ADDJOB pbq z 0":
        "timing: rarely, A's PAUSE ... bcast has not reached B even two commands later, and "
        "B takes the job (checked: the original's -PAUSED, or a job ID; that job is then "
        "removed again with FASTACK on a helper connection to B, so that the later blocks "
        "see the original's jobs)",
    "cluster.md: [B:7913] QSTAT fedq":
        "timing: import-rate is the original's ceil(jobs * 1000 / max(ms since the window "
        "started, 50)); the window starts when B's GETJOB first asked, so the figure depends "
        "on how many ms the import and this QSTAT took: the original's 20 means <= 50 ms, our "
        "Python nodes may take a little longer (checked: 1 <= import-rate <= 20, all else as "
        "the original)",
    "cluster.md: C (no jobs in pbq)":
        "timing: as for B: the broadcast may reach C after the client's command (checked: "
        "in, or none)",
    # -- deliberate, in the cluster: nodes known to hold a copy of a job are
    # in its nodes-delivered (disque/core/clustered.py _merge_delivered,
    # commit e695698), so that QUEUED, SETACK and DELJOB reach every copy.
    "cluster.md: [B:7913] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1":
        "deliberate: a job moved by federation has the importing node in nodes-delivered, on "
        "the importer (_on_yourjobs) and on the source (_on_needjobs); the original keeps the "
        "source's list, A alone (checked: nodes-delivered is A and B, all else as the original)",
    "cluster.md: [A:7912] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1":
        "deliberate, consequence of the above: B's ACKJOB (delivered A, B) sends SETACK to A, "
        "so A's copy is acked and collected; the original's B (delivered A only, confirmed B: "
        "the same count) deletes its copy without telling A, whose copy stays active and "
        "would be delivered again after RETRY (checked: nodes-delivered A and B, state acked, "
        "or still active while the SETACK is in flight, or $-1 once collected)",
    "cluster.md: [A:7912] INFO jobs":
        "deliberate, consequence of the above: A's copy of the federated job was collected "
        "(checked: registered_jobs one less than the original's)",
    "cluster.md: [A:7912] JSCAN 0 COUNT 100 REPLY all":
        "deliberate, consequence of the above: A's copy of the federated job (fedq) was "
        "collected (checked: the iteration has every other job of the original, with the "
        "usual record rules, and not that one)",
}

# Known differences that are races: the block may also match the original.
RACES = {
    "cluster.md: right after ACKJOB on A",
    "cluster.md: on B right after ACKJOB on A",
    "cluster.md: SHOW after ACKJOB of unknown ID (cluster)",
    "cluster.md: on B after FASTACK on A",
    "cluster.md: CLUSTER INFO (immediately after MEET)",
    "cluster.md: [B:7913] PAUSE pbq state",
    "cluster.md: C (no jobs in pbq)",
    "cluster.md: [B:7913] ADDJOB pbq z 0",
    "cluster.md: [B:7913] QSTAT fedq",
}


# Checks of the known differences that allow one (same signature).

EXTENSION_COMMANDS = (b"revive", b"acl", b"schedule", b"qlimit")


def known_command_count(exp, ours, r):
    want = (":", exp[1] + len(EXTENSION_COMMANDS))
    return [] if ours == want else ["expected %r" % (want,)]


def known_auth_with_user(exp, ours, r):
    want = ("-", b"WRONGPASS invalid username-password pair or user is disabled.")
    return [] if ours == want else ["expected %r" % (want,)]


def known_structsize(exp, ours, r):
    ok = ours[0] == "$" and ours[1] and re.match(rb"\Abits:64 job:\d+", ours[1])
    return [] if ok else ["unexpected reply %r" % (ours,)]


def _gc_in_progress(exp, ours, r):
    """$-1 as the original, or the job still there: acked (or not yet, on
    a node the ACK did not reach), confirmed by a subset of its nodes."""
    if ours == exp:
        return []
    if not is_record(ours):
        return ["neither $-1 nor a job record: %r" % (ours,)]
    job_id = split_requests(r.map_sent(r.current))[0][1]
    delivered = {x[1] for x in field(ours, b"nodes-delivered")[1]}
    confirmed = {x[1] for x in field(ours, b"nodes-confirmed")[1]}
    me = r.our_node_id(r.current_node)
    # A dummy ACK (no known copies) counts every node that answered.
    may_confirm = delivered | {me} if delivered else {r.our_node_id(n) for n in ORIGINAL_CLUSTER}
    if field(ours, b"id") != ("$", job_id) or not confirmed <= may_confirm:
        return ["not the job %r with GC in progress: %r" % (job_id, ours)]
    return []


def known_acked_in_progress(exp, ours, r):
    problems = _gc_in_progress(exp, ours, r)
    if not problems and ours != exp and field(ours, b"state") != ("$", b"acked"):
        problems.append("expected the job acked, got %r" % (field(ours, b"state"),))
    return problems


def known_not_yet_collected(exp, ours, r):
    return _gc_in_progress(exp, ours, r)


def known_dummy_ack(exp, ours, r):
    problems = known_acked_in_progress(exp, ours, r)
    if not problems and ours != exp and (field(ours, b"queue") != ("$", None)
                                         or field(ours, b"nodes-delivered") != ("*", [])):
        problems.append("not a dummy ACK: %r" % (ours,))
    return problems


def known_deljob_in_flight(exp, ours, r):
    problems = _gc_in_progress(exp, ours, r)
    if not problems and ours != exp and field(ours, b"state") == ("$", b"acked"):
        problems.append("FASTACK acks nothing: %r" % (ours,))
    return problems


def known_import_rate_timing(exp, ours, r):
    if exp[0] != "*" or field(exp, b"import-rate") != (":", 20):
        return ["the original's import-rate changed: %r" % (exp,)]
    rate = field(ours, b"import-rate") if ours[0] == "*" else None
    if rate is None or rate[0] != ":" or not 1 <= rate[1] <= 20:
        return ["expected 1 <= import-rate <= 20, got %r" % (rate,)]
    return check_qstat(set_field(exp, b"import-rate", rate), ours, r)


def known_federated_delivered(exp, ours, r):
    if r.current_node == "A" and ours == ("$", None):
        return []  # already collected (B's GOTACK and DELJOB went fast)
    exp = set_field(exp, b"nodes-delivered", ids(r.our_node_id("A"), r.our_node_id("B")))
    if is_record(ours) and r.current_node == "A" and field(ours, b"state") == ("$", b"acked"):
        # Acked: its next wake-up is a GC attempt (the original's timers
        # of an active job do not apply).
        exp = set_field(exp, b"state", ("$", b"acked"))
        exp = set_field(exp, b"next-awake-within", (":", ACKED_GC_WITHIN_MS // 2))
    return check_job_record(exp, ours, r)


def known_registered_jobs_minus_one(exp, ours, r):
    want = ("$", exp[1].replace(b"registered_jobs:9\r\n", b"registered_jobs:8\r\n"))
    return [] if ours == want and want != exp else ["expected %r" % (want,)]


def known_meet_in_progress(exp, ours, r):
    if ours[0] != "$" or ours[1] is None:
        return ["not a bulk: %r" % (ours,)]
    f = dict(line.split(b":", 1) for line in ours[1].split(b"\r\n") if b":" in line)
    try:
        reachable, size = int(f[b"cluster_reachable_nodes"]), int(f[b"cluster_size"])
    except (KeyError, ValueError):
        return ["bad CLUSTER INFO %r" % (ours,)]
    want = exp[1].replace(b"cluster_reachable_nodes:0\r\n", b"cluster_reachable_nodes:%d\r\n" % reachable)
    want = want.replace(b"cluster_size:1\r\n", b"cluster_size:%d\r\n" % size)
    problems = check_cluster_info(("$", want), ours, r)
    if size != reachable + 1 or size > 3:
        problems.append("cluster_size %d with %d reachable nodes" % (size, reachable))
    return problems


def known_addjob_before_pause(exp, ours, r):
    if ours == exp:
        return []
    if ours[0] != "+" or not JOB_ID_FULL.match(ours[1]):
        return ["expected %r or a job ID, got %r" % (exp, ours)]
    assert r.conn("B helper").call(b"FASTACK", ours[1]) == (":", 1)
    return []


def known_pause_in_flight(exp, ours, r):
    other = {("+", b"in"): ("+", b"none"), ("+", b"none"): ("+", b"in")}.get(exp)
    return [] if ours in (exp, other) else ["expected %r or %r" % (exp, other)]


KNOWN_CHECKS = {
    "admin.md: COMMAND COUNT": known_command_count,
    "admin.md: DEBUG STRUCTSIZE": known_structsize,
    "errors.md: AUTH a b": known_auth_with_user,
    "cluster.md: CLUSTER INFO (immediately after MEET)": known_meet_in_progress,
    "cluster.md: [B:7913] PAUSE pbq state": known_pause_in_flight,
    "cluster.md: C (no jobs in pbq)": known_pause_in_flight,
    "cluster.md: [B:7913] ADDJOB pbq z 0": known_addjob_before_pause,
    "cluster.md: right after ACKJOB on A": known_acked_in_progress,
    "cluster.md: on B right after ACKJOB on A": known_not_yet_collected,
    "cluster.md: SHOW after ACKJOB of unknown ID (cluster)": known_dummy_ack,
    "cluster.md: on B after FASTACK on A": known_deljob_in_flight,
    "cluster.md: [B:7913] QSTAT fedq": known_import_rate_timing,
    "cluster.md: [B:7913] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1": known_federated_delivered,
    "cluster.md: [A:7912] SHOW D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1": known_federated_delivered,
    "cluster.md: [A:7912] INFO jobs": known_registered_jobs_minus_one,
}

# Known differences of a SCAN iteration: key -> the original's items the
# difference removes (function of the replayer; they must be missing).
KNOWN_SCAN_MISSING = {
    "cluster.md: [A:7912] JSCAN 0 COUNT 100 REPLY all": lambda r: {r.idmap.get(FEDERATED_JOB)},
}


assert set(KNOWN_CHECKS) | RACES | set(KNOWN_SCAN_MISSING) <= set(KNOWN_DIFFERENCES)


def known_key(block):
    """The KNOWN_DIFFERENCES key of a block, or None."""
    keys = []
    if block.title:
        keys.append("%s: %s (%s)" % (block.file, block.command, block.title))
        keys.append("%s: %s" % (block.file, block.title))
    if block.tag:
        keys.append("%s: [%s] %s" % (block.file, block.tag, block.command))
    keys.append("%s: %s" % (block.file, block.command))
    for k in keys:
        if k in KNOWN_DIFFERENCES:
            return k
    return None
