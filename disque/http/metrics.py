"""``/metrics``: the node's state in the Prometheus text format (0.0.4).

Names follow Prometheus' conventions: ``disque_`` first, base units
(seconds, bytes), ``_total`` on counters.  Every value is read from the
same state INFO reports, at scrape time; nothing is kept for the scrape.

Queue labels are bounded: the ``metrics-max-queues`` longest queues (ties
by name) get their own series; the others are summed under
``queue="_other"`` so totals stay right whatever the number of queues.
A user limited to some queues (disque.access.acl) sees the series of those only.
"""

from typing import Iterable, List, Tuple

from .. import DISQUE_VERSION
from ..commands import ORDER, TABLE, views

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
OTHER = "_other"  # the label of the queues past metrics-max-queues


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(value) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return _escape(str(value))


def _number(value) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(int(value))


class Exposition:
    """Families written one after the other: ``# HELP``, ``# TYPE``, then
    the samples (a family is never split)."""

    def __init__(self):
        self.lines: List[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Tuple[dict, object]]):
        self.lines.append("# HELP %s %s" % (name, help_text))
        self.lines.append("# TYPE %s %s" % (name, kind))
        sample_name = name
        for labels, value in samples:
            if labels:
                text = ",".join('%s="%s"' % (k, _label_text(v)) for k, v in labels.items())
                self.lines.append("%s{%s} %s" % (sample_name, text, _number(value)))
            else:
                self.lines.append("%s %s" % (sample_name, _number(value)))

    def histogram(self, name: str, help_text: str, histogram) -> None:
        """A :class:`disque.core.latency.Histogram` (milliseconds) as a
        Prometheus histogram in seconds."""
        self.lines.append("# HELP %s %s" % (name, help_text))
        self.lines.append("# TYPE %s histogram" % name)
        for bound, n in histogram.cumulative():
            le = "+Inf" if bound == float("inf") else repr(bound)
            self.lines.append('%s_bucket{le="%s"} %d' % (name, le, n))
        self.lines.append("%s_sum %s" % (name, repr(histogram.total_ms / 1000.0)))
        self.lines.append("%s_count %d" % (name, histogram.count))

    def one(self, name: str, kind: str, help_text: str, value, **labels):
        self.family(name, kind, help_text, [(labels, value)])

    def render(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


def _queue_series(ctx, limit: int, visible=None):
    """[(label, length, added, removed, acked, nacked, paused state)]
    (disque.commands.views.queue_counters): the ``limit`` longest queues,
    then ``_other`` summing the rest (if any; its pause state None).
    ``visible``: None, or a test of queue names: the queues it refuses
    are left out (of ``_other`` too)."""
    out, others = views.longest_queues(ctx, limit, visible)
    if others:
        length = added = removed = acked = nacked = 0
        for _, n, a, r, ack, nack, _ in others:
            length += n
            added += a
            removed += r
            acked += ack
            nacked += nack
        out.append((OTHER, length, added, removed, acked, nacked, None))
    return out


def _queue_limits(e, limits, visible) -> None:
    """The queue limits (QLIMIT, docs/extensions.md): node-wide, and for
    each limited queue (there are few: no cap, unlike the queue series)."""
    limited = sorted((name, lim) for name, lim in limits.by_name.items() if visible is None or visible(name))
    e.one("disque_limit_held_total", "counter", "GETJOBs a queue limit cut short or made wait here (all queues).",
          limits.held)
    e.family("disque_queue_limit_rate", "gauge", "Each limited queue's rate limit, deliveries per second "
             "cluster-wide (0: none).", [({"queue": name}, lim.limit.rate_milli / 1000.0) for name, lim in limited])
    e.family("disque_queue_limit_concurrency", "gauge", "Each limited queue's concurrency limit, cluster-wide "
             "(0: none).", [({"queue": name}, lim.limit.concurrency) for name, lim in limited])
    e.family("disque_queue_limit_share", "gauge", "This node's part of each limited queue's rate (0 to 1).",
             [({"queue": name}, float(lim.share)) for name, lim in limited])
    e.family("disque_queue_limit_in_flight", "gauge", "Jobs of each limited queue delivered here and not yet "
             "done (counted under a concurrency limit).",
             [({"queue": name}, limits.inflight.get(name, 0)) for name, lim in limited])
    e.family("disque_queue_limit_held_total", "counter", "GETJOBs each limited queue's limit cut short or made "
             "wait here (QSTAT held).", [({"queue": name}, lim.held) for name, lim in limited])


def render(runtime, visible=None) -> bytes:
    """The exposition for the node served by ``runtime`` (an
    ``IClientRuntime``: the node's figures come from
    :mod:`disque.commands.views` and the runtime's declared methods).
    ``visible``: None, or a test of queue names (a user's
    ``may_queue``): the per-queue series of the queues it refuses are
    left out; the node-wide figures stay, as INFO shows them to every
    user."""
    ctx, config = runtime.ctx, runtime.config
    node = views.node_counters(ctx)  # the node's own figures
    process = runtime.process_info()
    used, rss, _ = runtime.memory()
    sys_, user, _, _ = runtime.cpu_times()
    stats = ctx.stats
    e = Exposition()

    e.one("disque_info", "gauge", "Constant 1, labelled with the node's ID, version and runtime.", 1,
          node_id=node["id"], version=DISQUE_VERSION, runtime=process["runtime"])
    e.one("disque_uptime_seconds", "gauge", "Seconds since the node started.", process["uptime"])

    # Clients and commands
    e.one("disque_connected_clients", "gauge", "Client connections open now.", len(ctx.clients))
    e.one("disque_blocked_clients", "gauge", "Clients blocked in GETJOB.", node["blocked"])
    e.one("disque_connections_received_total", "counter", "Client connections accepted.", stats.connections)
    e.one("disque_rejected_connections_total", "counter", "Client connections refused (maxclients, "
          "protected mode).", stats.rejected)
    e.one("disque_auth_failures_total", "counter", "Wrong passwords from clients (AUTH and HTTP).",
          stats.auth_failures)
    e.one("disque_auth_delayed_total", "counter", "Wrong passwords answered late: their source failed "
          "too often in a row.", stats.auth_delayed)
    e.one("disque_auth_refused_total", "counter", "Passwords refused unchecked: their source failed too "
          "often within a minute.", stats.auth_refused)
    e.one("disque_bus_auth_failures_total", "counter", "Bus connections closed before they proved themselves (a failed "
          "cluster-password handshake, nothing within 5 s, too many waiting).",
          stats.bus_auth_failures)
    limit, held = runtime.clients_memory()
    e.one("disque_client_memory_bytes", "gauge", "What client connections hold together (requests not run, "
          "replies not sent), counted while maxmemory-clients is set (0 otherwise).", held)
    e.one("disque_client_memory_max_bytes", "gauge", "The maxmemory-clients limit in bytes (0: none).", limit)
    e.one("disque_evicted_clients_total", "counter", "Clients closed because all clients together held more "
          "than maxmemory-clients.", stats.evicted_clients)
    e.one("disque_net_input_bytes_total", "counter", "Bytes read from clients.", stats.net_in)
    e.one("disque_net_output_bytes_total", "counter", "Bytes written to clients.", stats.net_out)
    e.one("disque_commands_processed_total", "counter", "Commands run, all kinds.", stats.commands)
    calls = [(TABLE[name], name.decode()) for name in ORDER if TABLE[name].calls]
    e.family("disque_commands_total", "counter", "Commands run, by command.",
             [({"command": name}, cmd.calls) for cmd, name in calls])
    e.family("disque_command_duration_seconds_total", "counter", "Time spent running each command.",
             [({"command": name}, cmd.usec / 1e6) for cmd, name in calls])

    # Jobs and queues
    e.one("disque_jobs", "gauge", "Jobs this node holds (registered_jobs of INFO).", node["jobs"])
    e.family("disque_jobs_by_state", "gauge", "Jobs this node holds, by state (as SHOW names them).",
             [({"state": state}, n) for state, n in node["job_states"].items()])
    e.one("disque_acks_total", "counter", "Jobs acknowledged by clients here (ACKJOB, FASTACK).", node["acked"])
    e.one("disque_nacks_total", "counter", "NACKs received here (the job queued again, at once or after a delay, "
          "or moved to its dead-letter queue).", node["nacked"])
    e.one("disque_dead_letters_total", "counter", "Jobs this node moved to a dead-letter queue (MAXDELIVERIES).",
          node["dead_letters"])
    e.one("disque_queues", "gauge", "Queues this node knows (registered_queues of INFO).", node["queues"])
    series = _queue_series(ctx, config["metrics-max-queues"], visible)
    e.family("disque_queue_jobs", "gauge", "Jobs waiting in each queue (QLEN).",
             [({"queue": s[0]}, s[1]) for s in series])
    e.family("disque_queue_added_total", "counter", "Jobs queued in each queue (QSTAT jobs-in).",
             [({"queue": s[0]}, s[2]) for s in series])
    e.family("disque_queue_removed_total", "counter", "Jobs taken out of each queue (QSTAT jobs-out).",
             [({"queue": s[0]}, s[3]) for s in series])
    e.family("disque_queue_acks_total", "counter", "Jobs of each queue acknowledged by clients here.",
             [({"queue": s[0]}, s[4]) for s in series])
    e.family("disque_queue_nacks_total", "counter", "NACKs of each queue's jobs received here.",
             [({"queue": s[0]}, s[5]) for s in series])
    e.family("disque_queue_paused", "gauge", "1 for each queue's pause state (QSTAT pause).",
             [({"queue": s[0], "state": s[6].decode()}, 1) for s in series if s[6] is not None])
    _queue_limits(e, ctx.node.qlimits, visible)

    # Schedules (docs/extensions.md): the series exist once a schedule does
    schedules = views.schedule_rows(ctx, visible)
    recurring = ctx.node.recurring
    if recurring.specs:
        e.one("disque_schedules", "gauge", "Schedules this node keeps (every node keeps them all).",
              len(recurring.specs))
        e.one("disque_schedules_settled", "gauge", "1 once this node has heard the cluster since it started or "
              "resumed: it fires runs only then.", 1 if recurring.settled else 0)
        e.one("disque_schedule_runs_skipped_total", "counter", "Runs this node skipped: due while the whole "
              "cluster was down (CATCHUP skip or one), or refused by their queue (MAXLEN, PAUSED).",
              recurring.skipped)
        e.family("disque_schedule_runs_fired_total", "counter", "Runs of each schedule this node added.",
                 [({"schedule": row[0]}, row[5]) for row in schedules])
        e.family("disque_schedule_runs", "gauge", "Runs of each schedule added cluster-wide, as far as the "
                 "node that added the last one knew.", [({"schedule": row[0]}, row[3]) for row in schedules])
        e.family("disque_schedule_last_run_timestamp_seconds", "gauge", "Time of each schedule's last run "
                 "(fired or skipped).", [({"schedule": row[0]}, row[6] / 1000.0) for row in schedules if row[6]])
        e.family("disque_schedule_next_run_timestamp_seconds", "gauge", "Time of each schedule's next run.",
                 [({"schedule": row[0]}, row[7] / 1000.0) for row in schedules])
        e.family("disque_schedule_paused", "gauge", "1 for each paused schedule.",
                 [({"schedule": row[0]}, 1 if row[2] else 0) for row in schedules])

    # Latency
    latency = node["latency"]
    e.histogram("disque_getjob_wait_seconds", "GETJOB waits: 0 when served at once, else until the job or the "
                "timeout.", latency["getjob_wait"])
    e.histogram("disque_addjob_replication_seconds", "ADDJOB until the copies asked for are confirmed.",
                latency["addjob_replication"])
    e.histogram("disque_job_add_to_ack_seconds", "Job time from ADDJOB to its ACK on this node.",
                latency["add_to_ack"])

    # Cluster
    peers = views.cluster_peers(ctx)
    e.one("disque_cluster_known_nodes", "gauge", "Nodes in this node's table, itself included.",
          node["known_nodes"])
    e.one("disque_cluster_reachable_nodes", "gauge", "Peers not failing, in handshake or suspected.",
          node["reachable_nodes"])
    e.family("disque_cluster_peer_up", "gauge", "1 if the peer is reachable (not failing or suspected).",
             [({"node_id": node_id, "address": address}, 1 if up else 0)
              for node_id, address, up, _, _ in peers])
    e.family("disque_cluster_link_connected", "gauge", "1 while this node's link to the peer is up.",
             [({"node_id": node_id}, 1 if connected else 0) for node_id, _, _, connected, _ in peers])
    e.family("disque_cluster_peer_leaving", "gauge", "1 if the peer is leaving the cluster.",
             [({"node_id": node_id}, 1 if leaving else 0) for node_id, _, _, _, leaving in peers])

    # Memory, CPU, persistence
    e.one("disque_memory_used_bytes", "gauge", "The node's estimate of its data (compared with maxmemory).",
          used)
    e.one("disque_memory_max_bytes", "gauge", "The maxmemory directive.", config["maxmemory"])
    e.one("disque_memory_tier", "gauge", "0 below 75% of maxmemory; 1 above (new jobs keep no local copy); "
          "2 above 95% (evicting); 3 full (refusing).", node["memory_tier"])
    e.one("disque_resident_memory_bytes", "gauge", "Resident set size of the process.", rss)
    e.one("disque_cpu_user_seconds_total", "counter", "User CPU time of the process.", float(user))
    e.one("disque_cpu_system_seconds_total", "counter", "System CPU time of the process.", float(sys_))
    info = dict(runtime.persistence_info())
    if "aof_enabled" in info:
        e.one("disque_aof_enabled", "gauge", "1 while the append only file is written.", int(info["aof_enabled"]))
    if "aof_rewrite_in_progress" in info:
        e.one("disque_aof_rewrite_in_progress", "gauge", "1 while the AOF is rewritten.",
              int(info["aof_rewrite_in_progress"]))
    if "aof_last_write_status" in info:
        e.one("disque_aof_write_error", "gauge", "1 while records cannot be written or fsynced (a full disk, an I/O "
              "error): writes are refused with -MISCONF until it is solved.",
              int(info["aof_last_write_status"] != "ok"))
    e.one("disque_nodes_file_write_error", "gauge", "1 while the node file cannot be saved (retried every "
          "tick).", int(info.get("nodes_file_status", "ok") != "ok"))
    if "aof_current_size" in info:
        e.one("disque_aof_size_bytes", "gauge", "Size of the append only file.", int(info["aof_current_size"]))
    # Progress of long work: while it runs (INFO shows its fields then).
    if "loading" in info:
        e.one("disque_loading", "gauge", "1 while the AOF loads (clients get -LOADING).", int(info["loading"]))
    if "loading_loaded_perc" in info:
        e.one("disque_loading_progress_ratio", "gauge", "Share of the AOF's bytes loaded (while loading).",
              float(info["loading_loaded_perc"]) / 100)
        e.one("disque_loading_eta_seconds", "gauge", "Seconds the load still takes at its rate so far.",
              int(info["loading_eta_seconds"]))
    if "aof_rewrite_progress_perc" in info:
        e.one("disque_aof_rewrite_progress_ratio", "gauge", "Share of the jobs the AOF rewrite went through "
              "(while it runs).", float(info["aof_rewrite_progress_perc"]) / 100)
        e.one("disque_aof_rewrite_eta_seconds", "gauge", "Seconds the AOF rewrite still takes at its rate so far.",
              int(info["aof_rewrite_eta_seconds"]))
    if int(info.get("aof_last_rewrite_time_sec", -1)) >= 0:
        e.one("disque_aof_last_rewrite_duration_seconds", "gauge", "Duration of the last AOF rewrite.",
              int(info["aof_last_rewrite_time_sec"]))
    return e.render()
