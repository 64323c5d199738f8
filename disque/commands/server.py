"""Server commands: PING, TIME, HELLO, INFO, COMMAND, CONFIG, CLIENT, AUTH,
DEBUG, SHUTDOWN, SLOWLOG, LATENCY, MONITOR, BGREWRITEAOF, CLUSTER."""

import re

from .. import DISQUE_VERSION
from ..config import ConfigSetError
from ..resp import reply
from ..access.protection import DEBUG_NOT_ALLOWED, debug_allowed
from . import ORDER, TABLE, client_info, command
from .audit import audit_command
from .args import parse_int_or_error, parse_ll
from .jobs import SYNTAX


@command("ping", -1, "readonly fast")
def ping(ctx, client, argv):
    if len(argv) > 2:
        return b"-ERR wrong number of arguments for 'ping' command\r\n"
    return reply.bulk(argv[1]) if len(argv) == 2 else reply.PONG


@command("time", 1, "readonly fast")
def time_(ctx, client, argv):
    us = ctx.runtime.now_us()
    return reply.bulk_array((b"%d" % (us // 1_000_000), b"%d" % (us % 1_000_000)))


def node_priority(node, cluster_node) -> bytes:
    """HELLO priority, lower is better (clients pick the lowest), as the
    original: 100 for a node failed or leaving, 10 for one suspected
    (PFAIL), 5 for a peer we have no link to, 1 for the others."""
    if cluster_node is node.cluster.myself:
        return b"100" if node.cluster.leaving else b"1"
    if cluster_node.leaving or cluster_node.fail:
        return b"100"
    if cluster_node.pfail:
        return b"10"
    if not cluster_node.connected:
        return b"5"
    return b"1"


def ordered_nodes(node):
    """Peers first, myself last, as the original lists them."""
    cluster = node.cluster
    return [n for n in cluster.nodes.values() if n is not cluster.myself and not n.handshake] + [cluster.myself]


@command("hello", 1, "readonly fast")
def hello(ctx, client, argv):
    node = ctx.node
    # Version, my ID, then one [id, host, port, priority] array per node,
    # all in the top level array (helloCommand).
    entries = []
    for n in ordered_nodes(node):
        entries.append(reply.bulk_array((n.id, n.host, b"%d" % n.port, node_priority(node, n))))
    return b"*%d\r\n:1\r\n" % (2 + len(entries)) + reply.bulk(node.my_id) + b"".join(entries)


# ----------------------------------------------------------------------
# INFO
# ----------------------------------------------------------------------

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
        ("gcc_version", p["gcc_version"]), ("runtime", p["runtime"]), ("process_id", p["process_id"]),
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
    return _section(b"Queues", [("registered_queues", len(ctx.node.queues))])


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
    b"stats": info_stats, b"cpu": info_cpu, b"commandstats": info_commandstats,
}
DEFAULT_SECTIONS = (b"server", b"clients", b"memory", b"jobs", b"queues", b"persistence", b"stats", b"cpu")


def info_text(ctx, section: bytes = b"default") -> bytes:
    """Sections separated by an empty line; no empty line after the last."""
    if section in (b"default", b"all"):
        names = DEFAULT_SECTIONS + ((b"commandstats",) if section == b"all" else ())
        return b"\r\n".join(INFO_SECTIONS[n](ctx) for n in names)
    fn = INFO_SECTIONS.get(section)
    return fn(ctx) if fn else b""


@command("info", -1, "readonly loading")
def info(ctx, client, argv):
    if len(argv) > 2:
        raise SYNTAX
    section = argv[1].lower() if len(argv) == 2 else b"default"
    return reply.bulk(info_text(ctx, section))


# ----------------------------------------------------------------------
# COMMAND
# ----------------------------------------------------------------------

def command_entry(cmd) -> bytes:
    flags = b"*%d\r\n" % len(cmd.flags) + b"".join(b"+" + f + b"\r\n" for f in cmd.flags)
    return b"*6\r\n" + reply.bulk(cmd.name) + reply.integer(cmd.shown_arity) + flags + b":0\r\n:0\r\n:0\r\n"


E_SUBCOMMAND = b"-ERR Unknown subcommand or wrong number of arguments.\r\n"


@command("command", 0, "readonly loading")
def command_(ctx, client, argv):
    if len(argv) == 1:  # a renamed command is listed by its own name, a disabled one not at all
        present = {id(cmd) for cmd in ctx.commands.values()}
        return reply.array(command_entry(TABLE[n]) for n in ORDER if id(TABLE[n]) in present)
    sub = argv[1].lower()
    if sub == b"info":
        out = []
        for name in argv[2:]:
            cmd = ctx.commands.get(name.lower())
            out.append(command_entry(cmd) if cmd else reply.NULL_BULK)
        return reply.array(out)
    if sub == b"count" and len(argv) == 2:
        return reply.integer(len(ctx.commands))
    return E_SUBCOMMAND


# ----------------------------------------------------------------------
# CONFIG
# ----------------------------------------------------------------------

@command("config", -2, "readonly admin")
def config(ctx, client, argv):
    sub = argv[1].lower()
    argc = len(argv)
    try:
        if sub == b"get":
            if argc != 3:
                return reply.err(b"Wrong number of arguments for CONFIG GET")
            pairs = ctx.config.get_all(argv[2])
            return reply.bulk_array(v for pair in pairs for v in pair)
        if sub == b"set":
            if argc != 4:
                return reply.err(b"Wrong number of arguments for CONFIG SET")
            ctx.config.set(argv[2], argv[3])
            audit_command(ctx, client, b"config", argv)
            return reply.OK
        if sub == b"resetstat":
            if argc != 2:
                return reply.err(b"Wrong number of arguments for CONFIG RESETSTAT")
            ctx.stats.reset()
            for cmd in TABLE.values():
                cmd.calls = cmd.usec = 0
            audit_command(ctx, client, b"config", argv)
            return reply.OK
        if sub == b"rewrite":
            if argc != 2:
                return reply.err(b"Wrong number of arguments for CONFIG REWRITE")
            ctx.config.rewrite()
            audit_command(ctx, client, b"config", argv)
            return reply.OK
    except ConfigSetError as e:
        return reply.err(e.args[0])
    return reply.err(b"CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


# ----------------------------------------------------------------------
# CLIENT
# ----------------------------------------------------------------------

CLIENT_SYNTAX = b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)\r\n"
_BAD_NAME = re.compile(rb"[^!-~]")


def client_line(ctx, c, now_s) -> bytes:
    flags = b"b" if ctx.node.getjob.is_blocked(c) else (b"O" if c.monitor else b"N")
    return b"id=%d addr=%s fd=%d name=%s age=%d idle=%d flags=%s qbuf=%d qbuf-free=%d obl=0 oll=0 omem=0 events=r cmd=%s\n" % (
        c.id, c.addr, c.id + 6, c.name, now_s - c.ctime, now_s - c.atime, flags, c.qbuf,
        max(32768 - c.qbuf, 0), c.last_cmd)


@command("client", -2, "readonly admin")
def client_(ctx, client, argv):
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"list" and argc == 2:
        now_s = ctx.node.now // 1000
        return reply.bulk(b"".join(client_line(ctx, c, now_s) for c in ctx.clients.values()))
    if sub == b"getname" and argc == 2:
        return reply.bulk(client.name) if client.name else reply.NULL_BULK
    if sub == b"setname" and argc == 3:
        if _BAD_NAME.search(argv[2]):
            return reply.err(b"Client names cannot contain spaces, newlines or special characters.")
        client.name = argv[2]
        return reply.OK
    if sub == b"kill" and argc >= 3:
        result = client_kill(ctx, client, argv)
        audit_command(ctx, client, b"client", argv, "answered " + result.decode(errors="replace").strip())
        return result
    if sub == b"pause" and argc == 3:
        n = parse_ll(argv[2])
        if n is None or n < 0:
            return reply.err(b"timeout is not an integer or out of range")
        ctx.runtime.pause_clients(n)
        return reply.OK
    if sub == b"reply" and argc == 3:
        mode = argv[2].lower()
        modes = {b"on": reply.REPLY_ON, b"off": reply.REPLY_OFF, b"skip": reply.REPLY_SKIP_NEXT}
        if mode not in modes:
            raise SYNTAX
        client.reply_mode = modes[mode]
        return reply.OK
    if sub == b"setinfo" and argc == 4:
        attr = argv[2].lower()
        if attr not in (b"lib-name", b"lib-ver"):
            return reply.err(b"Unrecognized option '" + argv[2] + b"'")
        if _BAD_NAME.search(argv[3]):
            return reply.err(b"lib-name and lib-ver cannot contain spaces, newlines or special characters.")
        setattr(client, "lib_name" if attr == b"lib-name" else "lib_ver", argv[3])
        return reply.OK
    if sub == b"id" and argc == 2:
        return reply.integer(client.id)
    if sub == b"no-evict" and argc == 3 and argv[2].lower() in (b"on", b"off"):
        client.no_evict = argv[2].lower() == b"on"  # maxmemory-clients never closes it (Redis 7)
        return reply.OK
    return CLIENT_SYNTAX


def client_kill(ctx, client, argv):
    if len(argv) == 3:  # old form: CLIENT KILL addr
        for c in list(ctx.clients.values()):
            if c.addr == argv[2]:
                c.conn.close()
                return reply.OK
        return reply.err(b"No such client")
    if len(argv) % 2:
        raise SYNTAX
    want_id = want_addr = want_type = None
    skipme = True
    for i in range(2, len(argv), 2):
        opt, value = argv[i].lower(), argv[i + 1]
        if opt == b"id":
            want_id = parse_int_or_error(value)
        elif opt == b"addr":
            want_addr = value
        elif opt == b"type":
            want_type = value.lower()
            if want_type not in (b"normal", b"pubsub", b"slave"):
                return reply.err(b"Unknown client type '" + value + b"'")
        elif opt == b"skipme":
            v = value.lower()
            if v not in (b"yes", b"no"):
                raise SYNTAX
            skipme = v == b"yes"
        else:
            raise SYNTAX
    killed = 0
    for c in list(ctx.clients.values()):
        if want_id is not None and c.id != want_id:
            continue
        if want_addr is not None and c.addr != want_addr:
            continue
        if want_type is not None and want_type != b"normal":
            continue
        if c is client and skipme:
            continue
        c.conn.close()
        killed += 1
    return reply.integer(killed)


# ----------------------------------------------------------------------
# AUTH, MONITOR, SHUTDOWN, BGREWRITEAOF, SLOWLOG, LATENCY, DEBUG
# ----------------------------------------------------------------------

@command("auth", -2, "readonly loading fast", before_auth=True, shown_arity=2)
def auth(ctx, client, argv):
    """AUTH password (the default user, as the original) or AUTH username
    password (Redis 6).  A failed AUTH leaves the client unauthenticated,
    as the original does."""
    if len(argv) > 3:
        raise SYNTAX
    acl = ctx.acl
    if len(argv) == 2:
        if acl.default_nopass:
            return reply.err(b"Client sent AUTH, but no password is set")
        name, password, wrong = DEFAULT_USER, argv[1], WRONG_PASSWORD
    else:
        name, password, wrong = argv[1], argv[2], WRONGPASS
    refused = ctx.runtime.auth_gate(client)
    if refused is not None:
        return refused
    user = acl.authenticate(name, password)
    if user is not None:
        client.authenticated = True
        client.user = user
        ctx.runtime.auth_succeeded(client)
        return reply.OK
    client.authenticated = False
    acl.record(b"auth", b"AUTH", name, client_info(ctx, client))
    return ctx.runtime.auth_failed(client, wrong)


DEFAULT_USER = b"default"
WRONG_PASSWORD = b"-ERR invalid password\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"


@command("monitor", 1, "readonly admin")
def monitor(ctx, client, argv):
    if not client.monitor:
        client.monitor = True
        ctx.monitors.append(client)
    return reply.OK


@command("shutdown", -1, "readonly admin loading")
def shutdown(ctx, client, argv):
    if len(argv) > 2:
        raise SYNTAX
    mode = argv[1].lower() if len(argv) == 2 else b""
    if mode not in (b"", b"save", b"nosave", b"rewrite-aof"):
        raise SYNTAX
    audit_command(ctx, client, b"shutdown", argv)
    error = ctx.runtime.shutdown(mode.decode())
    if error:
        return reply.err(error)
    from ..resp.reply import BLOCKED

    return BLOCKED  # the connection closes with the process


@command("bgrewriteaof", 1, "readonly admin")
def bgrewriteaof(ctx, client, argv):
    audit_command(ctx, client, b"bgrewriteaof", argv)
    return ctx.runtime.bgrewriteaof()


SLOWLOG_ERR = b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"


@command("slowlog", -2, "readonly")
def slowlog(ctx, client, argv):
    sub = argv[1].lower()
    log = ctx.slowlog
    if sub == b"len" and len(argv) == 2:
        return reply.integer(len(log.entries))
    if sub == b"reset" and len(argv) == 2:
        log.entries.clear()
        return reply.OK
    if sub == b"get" and len(argv) in (2, 3):
        n = 10
        if len(argv) == 3:
            n = parse_int_or_error(argv[2])
        entries = list(log.entries)[: n if n >= 0 else None]
        return reply.array(
            b"*4\r\n" + reply.integer(eid) + reply.integer(ts) + reply.integer(us) + reply.bulk_array(args)
            for eid, ts, us, args in entries)
    return SLOWLOG_ERR


LATENCY_DOCTOR = (b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
                  b"instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in "
                  b"order to enable it. If we weren't in a deep space mission I'd suggest to take a look "
                  b"at http://disque.io/topics/latency-monitor.\n")


LATENCY_CALM = (b"Dave, no latency spike was observed during the lifetime of this Disque instance, not in "
                b"the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and "
                b"think things over.\n")
LATENCY_SPIKES = (b"Dave, I have observed latency spikes in this Disque instance. You don't mind talking "
                  b"about it, do you Dave?\n\n")
LATENCY_ADVICE = {
    b"command": b"- Some commands are slow: SLOWLOG GET shows which ones (long QPEEK, JSCAN or QSCAN "
                b"ranges, large job bodies, many IDs per ACKJOB or DELJOB).",
    b"fast-command": b"- Commands that should be quick took long: the node did not get the CPU (system "
                     b"load, other processes) or a garbage collection paused it (see gc-freeze-interval).",
}


@command("latency", -2, "readonly admin loading")
def latency(ctx, client, argv):
    sub = argv[1].lower()
    events = ctx.latency.events
    if sub == b"latest" and len(argv) == 2:
        return reply.array(b"*4\r\n" + reply.bulk(name) + reply.integer(s.samples[-1][0])
                           + reply.integer(s.samples[-1][1]) + reply.integer(s.max)
                           for name, s in events.items())
    if sub == b"history" and len(argv) == 3:
        series = events.get(argv[2])
        samples = series.samples if series is not None else ()
        return reply.array(b"*2\r\n" + reply.integer(t) + reply.integer(ms) for t, ms in samples)
    if sub == b"reset":
        return reply.integer(ctx.latency.reset(argv[2:]))
    if sub == b"doctor" and len(argv) == 2:
        return reply.bulk(latency_report(ctx))
    raise SYNTAX


def latency_report(ctx) -> bytes:
    """LATENCY DOCTOR: per event, the spikes seen and their statistics, then
    what to look at."""
    events = ctx.latency.events
    if not events:
        return LATENCY_CALM if ctx.latency_threshold else LATENCY_DOCTOR
    now = ctx.node.now // 1000
    out = [LATENCY_SPIKES]
    for number, (name, series) in enumerate(events.items(), 1):
        values = [ms for _, ms in series.samples]
        average = sum(values) // len(values)
        deviation = sum(abs(average - ms) for ms in values) // len(values)
        period = max(now - series.samples[0][0], 1)
        out.append(b"%d. %s: %d latency spikes (average %dms, mean deviation %dms, period %.2f sec). "
                   b"Worst all time event %dms.\n" % (number, name, len(values), average, deviation,
                                                      period / len(values), series.max))
    advice = [LATENCY_ADVICE[name] for name in events if name in LATENCY_ADVICE]
    if advice:
        out.append(b"\nI have a few advices for you:\n\n" + b"\n".join(advice) + b"\n")
    return b"".join(out)


def _debug_error(sub):
    return reply.err(b"Unknown DEBUG subcommand or wrong number of arguments for '" + sub + b"'")


@command("debug", -2, "admin")
def debug(ctx, client, argv):
    """DEBUG, where ``enable-debug-command`` allows it (:mod:`disque.access.protection`);
    every call is audited, refused ones too."""
    if not debug_allowed(ctx, client):
        audit_command(ctx, client, b"debug", argv, "refused: enable-debug-command is %s"
                      % ctx.config["enable-debug-command"])
        return DEBUG_NOT_ALLOWED
    audit_command(ctx, client, b"debug", argv)
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"flushall" and argc == 2:
        ctx.node.flush_all()
        ctx.runtime.flushed()
        return reply.OK
    if sub == b"sleep" and argc == 3:
        try:
            seconds = float(argv[2])
        except ValueError:
            seconds = 0.0
        ctx.runtime.sleep(max(seconds, 0.0))
        return reply.OK
    if sub == b"error" and argc == 3:
        return b"-" + argv[2].replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n"
    if sub == b"structsize" and argc == 2:
        return reply.bulk(ctx.runtime.struct_sizes())
    if sub == b"jobs" and argc == 2:
        return reply.integer(len(ctx.node.jobs))
    return _debug_error(argv[1])


# ----------------------------------------------------------------------
# CLUSTER (single node view; the cluster bus extends it)
# ----------------------------------------------------------------------

E_CLUSTER = b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"


def cluster_nodes_text(node) -> bytes:
    cluster = node.cluster
    lines = []
    for n in [n for n in cluster.nodes.values() if n is not cluster.myself] + [cluster.myself]:
        if n is cluster.myself:
            flags = [b"myself"] + ([b"leaving"] if cluster.leaving else [])
            link = b"connected"
            ping_sent = pong = 0
        else:
            flags = n.flag_names()
            link = b"connected" if n.connected else b"disconnected"
            ping_sent, pong = n.ping_sent, n.pong_received
        lines.append(b"%s %s:%d %s %d %d %s\n" % (n.id, n.host, n.port, b",".join(flags) or b"noflags",
                                                  ping_sent, pong, link))
    return b"".join(lines)


@command("cluster", -2, "readonly admin")
def cluster(ctx, client, argv):
    node = ctx.node
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"nodes" and argc == 2:
        return reply.bulk(cluster_nodes_text(node))
    if sub == b"myid" and argc == 2:
        return reply.bulk(node.my_id)
    if sub == b"info" and argc == 2:
        c = node.cluster
        text = (b"cluster_state:ok\r\ncluster_known_nodes:%d\r\ncluster_reachable_nodes:%d\r\n"
                b"cluster_size:%d\r\ncluster_stats_messages_sent:%d\r\n"
                b"cluster_stats_messages_received:%d\r\n") % (
            len(c.nodes), c.reachable, c.size, c.sent, c.received)
        return reply.bulk(text)
    if sub == b"leaving" and argc in (2, 3):
        if argc == 2:
            return b"+yes\r\n" if node.cluster.leaving else b"+no\r\n"
        value = argv[2].lower()
        if value not in (b"yes", b"no"):
            return reply.err(b"Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        node.cluster.set_leaving(value == b"yes")
        if node.cluster.leaving:
            from .queues import LEAVING

            node.getjob.unblock_all_with(LEAVING)
        return reply.OK
    if sub == b"forget" and argc == 3:
        target = argv[2]
        if len(target) != 40 or not all(c in b"0123456789abcdef" for c in target):
            return reply.err(b"Invalid node identifier")
        if target == node.my_id:
            return reply.err(b"I tried hard but I can't forget myself...")
        if not node.cluster.forget(target, node.now):
            return reply.err(b"Unknown node " + target)
        audit_command(ctx, client, b"cluster", argv)
        return reply.OK
    if sub == b"meet" and argc == 4:
        port = parse_ll(argv[3])
        if port is None:
            return reply.err(b"Invalid TCP port specified: " + argv[3])
        if not _valid_ip(argv[2]) or not 0 < port <= 65535 - 10000:
            return reply.err(b"Invalid node address specified: " + argv[2] + b":" + argv[3])
        node.cluster.meet(_normal_ip(argv[2]), port, node.now, explicit=True)
        audit_command(ctx, client, b"cluster", argv)
        return reply.OK
    if sub == b"reset" and argc == 3:
        how = argv[2].lower()
        if how not in (b"hard", b"soft"):
            raise SYNTAX
        node.cluster_reset(how == b"hard")
        audit_command(ctx, client, b"cluster", argv)
        return reply.OK
    if sub == b"saveconfig" and argc == 2:
        error = ctx.runtime.save_nodes()
        if error:
            return reply.err(b"error saving the cluster node config: " + error.encode())
        return reply.OK
    return E_CLUSTER


def _normal_ip(host: bytes) -> bytes:
    import ipaddress

    return str(ipaddress.ip_address(host.decode("ascii"))).encode()


def _valid_ip(host: bytes) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.decode("ascii"))
        return True
    except (ValueError, UnicodeDecodeError):
        return False
