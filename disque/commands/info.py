"""Commands by which the node describes itself: INFO (its sections, also
read by the HTTP side through :func:`info_text`), COMMAND (the command
table, in the original's order) and TIME."""

from .. import DISQUE_VERSION, __version__
from ..resp import reply
from . import ORDER, TABLE, command
from .args import subcommand
from .jobs import SYNTAX


@command("time", 1, "readonly fast")
def time_(ctx, client, argv):
    us = ctx.runtime.now_us()
    return reply.bulk_array((b"%d" % (us // 1_000_000), b"%d" % (us % 1_000_000)))


def _human(n: int) -> bytes:
    for unit, size in ((b"G", 1 << 30), (b"M", 1 << 20), (b"K", 1 << 10)):
        if n >= size:
            return b"%.2f%s" % (n / size, unit)
    return b"%dB" % n


def _section(title: bytes, fields) -> bytes:
    lines = [b"# " + title]
    for key, value in fields:
        if isinstance(value, int):
            value = b"%d" % value
        elif isinstance(value, float):
            value = b"%.2f" % value
        elif isinstance(value, str):
            value = value.encode()
        lines.append(key.encode() + b":" + value)
    return b"\r\n".join(lines) + b"\r\n"


def info_server(ctx):
    p = ctx.runtime.process_info()
    return _section(b"Server", [
        ("disque_version", DISQUE_VERSION), ("disque_git_sha1", "00000000"),
        ("disque_git_dirty", 0), ("disque_build_id", p["build_id"]), ("os", p["os"]),
        ("arch_bits", p["arch_bits"]), ("multiplexing_api", p["multiplexing_api"]),
        ("gcc_version", p["gcc_version"]), ("package_version", __version__), ("runtime", p["runtime"]),
        ("process_id", p["process_id"]),
        ("run_id", p["run_id"]), ("tcp_port", ctx.config["port"]),
        ("uptime_in_seconds", p["uptime"]), ("uptime_in_days", p["uptime"] // 86400),
        ("hz", ctx.config["hz"]), ("executable", p["executable"]),
        ("config_file", ctx.config.path or ""),
    ])


def info_clients(ctx):
    biggest = max((c.qbuf for c in ctx.clients.values()), default=0)
    return _section(b"Clients", [
        ("connected_clients", len(ctx.clients)), ("client_longest_output_list", 0),
        ("client_biggest_input_buf", biggest), ("blocked_clients", len(ctx.node.getjob)),
    ])


def info_memory(ctx):
    used, rss, peak = ctx.runtime.memory()
    return _section(b"Memory", [
        ("used_memory", used), ("used_memory_human", _human(used)),
        ("used_memory_rss", rss), ("used_memory_peak", peak),
        ("used_memory_peak_human", _human(peak)),
        ("mem_fragmentation_ratio", (rss / used) if used else 0.0),
        ("mem_allocator", "pymalloc"),
    ] + _while_clients_limited(ctx, "mem_clients_normal", ctx.runtime.clients_memory()[1]))


def _while_clients_limited(ctx, name, value):
    """Redis 7's field ``name`` while ``maxmemory-clients`` is set or has
    closed a client (so INFO is the original's otherwise)."""
    return [(name, value)] if ctx.runtime.clients_memory()[0] or ctx.stats.evicted_clients else []


def info_jobs(ctx):
    return _section(b"Jobs", [("registered_jobs", len(ctx.node.jobs))])


def info_queues(ctx):
    limits = ctx.node.qlimits
    fields = [("registered_queues", len(ctx.node.queues))]
    if limits.by_name:  # queue limits (QLIMIT, docs/extensions.md): the original's section without
        fields += [("limited_queues", len(limits.by_name)),
                   ("limited_in_flight", sum(limits.inflight.get(name, 0) for name in limits.by_name)),
                   ("limit_held_getjobs", limits.held)]
    return _section(b"Queues", fields)


def info_persistence(ctx):
    return _section(b"Persistence", list(ctx.runtime.persistence_info()))


def info_stats(ctx):
    s = ctx.stats
    ops, kin, kout = s.rates()
    return _section(b"Stats", [
        ("total_connections_received", s.connections), ("total_commands_processed", s.commands),
        ("instantaneous_ops_per_sec", ops), ("total_net_input_bytes", s.net_in),
        ("total_net_output_bytes", s.net_out), ("instantaneous_input_kbps", kin),
        ("instantaneous_output_kbps", kout), ("rejected_connections", s.rejected),
        ("latest_fork_usec", 0), ("auth_failures", s.auth_failures), ("auth_delayed", s.auth_delayed),
        ("auth_refused", s.auth_refused), ("bus_auth_failures", s.bus_auth_failures),
    ] + _while_clients_limited(ctx, "evicted_clients", s.evicted_clients))


def info_cpu(ctx):
    sys_, user, csys, cuser = ctx.runtime.cpu_times()
    return _section(b"CPU", [
        ("used_cpu_sys", float(sys_)), ("used_cpu_user", float(user)),
        ("used_cpu_sys_children", float(csys)), ("used_cpu_user_children", float(cuser)),
    ])


def info_schedules(ctx):
    """Schedules (docs/extensions.md): shown by default once one exists, so
    a node without any answers INFO as the original."""
    r = ctx.node.recurring
    return _section(b"Schedules", [
        ("schedules", len(r.specs)), ("schedules_paused", sum(1 for _, s in r.specs.values() if s.paused)),
        ("schedule_runs_fired", r.fired), ("schedule_runs_skipped", r.skipped),
        ("schedules_settled", 1 if r.settled else 0), ("catalog_entries", len(ctx.node.settings.catalog)),
        ("catalog_changes", ctx.node.settings.changes),
    ])


def info_commandstats(ctx):
    fields = []
    for name in ORDER:
        cmd = TABLE[name]
        if cmd.calls:
            fields.append(("cmdstat_" + name.decode(), b"calls=%d,usec=%d,usec_per_call=%.2f" % (
                cmd.calls, cmd.usec, cmd.usec / cmd.calls)))
    return _section(b"Commandstats", fields)


INFO_SECTIONS = {
    b"server": info_server, b"clients": info_clients, b"memory": info_memory,
    b"jobs": info_jobs, b"queues": info_queues, b"persistence": info_persistence,
    b"stats": info_stats, b"cpu": info_cpu, b"commandstats": info_commandstats, b"schedules": info_schedules,
}
DEFAULT_SECTIONS = (b"server", b"clients", b"memory", b"jobs", b"queues", b"persistence", b"stats", b"cpu")


def info_text(ctx, section: bytes = b"default") -> bytes:
    """Sections separated by an empty line; no empty line after the last."""
    if section in (b"default", b"all"):
        names = DEFAULT_SECTIONS + ((b"schedules",) if ctx.node.recurring.specs else ()) \
            + ((b"commandstats",) if section == b"all" else ())
        return b"\r\n".join(INFO_SECTIONS[n](ctx) for n in names)
    fn = INFO_SECTIONS.get(section)
    return fn(ctx) if fn else b""


@command("info", -1, "readonly loading")
def info(ctx, client, argv):
    if len(argv) > 2:
        raise SYNTAX
    section = argv[1].lower() if len(argv) == 2 else b"default"
    return reply.bulk(info_text(ctx, section))


def command_entry(cmd) -> bytes:
    flags = reply.array(map(reply.status, cmd.flags))
    return reply.array((reply.bulk(cmd.name), reply.integer(cmd.shown_arity), flags, reply.ZERO, reply.ZERO,
                        reply.ZERO))


E_SUBCOMMAND = b"-ERR Unknown subcommand or wrong number of arguments.\r\n"
COMMAND_ARITY = {b"info": -2, b"count": 2}


@command("command", 0, "readonly loading")
def command_(ctx, client, argv):
    if len(argv) == 1:  # a renamed command is listed by its own name, a disabled one not at all
        present = {id(cmd) for cmd in ctx.commands.values()}
        return reply.array(command_entry(TABLE[n]) for n in ORDER if id(TABLE[n]) in present)
    sub, fits = subcommand(argv, COMMAND_ARITY)
    if not fits:
        return E_SUBCOMMAND
    if sub == b"info":
        out = []
        for name in argv[2:]:
            cmd = ctx.commands.get(name.lower())
            out.append(command_entry(cmd) if cmd else reply.NULL_BULK)
        return reply.array(out)
    if sub == b"count":
        return reply.integer(len(ctx.commands))
    return E_SUBCOMMAND
