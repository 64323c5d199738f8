"""What command handlers see: the node, its config, the connected clients.

Handlers are pure functions of ``(ctx, client, argv)``; anything that needs
the process or the reactor (shutting down, sleeping, process statistics)
goes through ``ctx.runtime``, an :class:`disque.interfaces.INodeRuntime`
provided by the service (:class:`disque.node.runtime.NodeRuntime`; in-memory
tests build a real one on a ``task.Clock``).
"""

from collections import deque

from ..access.acl_config import acl_from_config
from ..contract import REPLY_ON


class ClientState:
    """One client connection, as the command layer knows it.

    ``conn`` is the adapter's handle: it must offer ``deliver(bytes)``
    (write a reply outside the normal request/reply flow) and ``close()``.
    """

    __slots__ = (
        "id", "addr", "laddr", "conn", "name", "ctime", "atime", "last_cmd",
        "authenticated", "reply_mode", "monitor", "qbuf", "lib_name", "lib_ver", "user", "local",
        "no_evict",
    )

    def __init__(self, client_id: int, addr: bytes, conn, now_s: int, laddr: bytes = b""):
        self.id = client_id
        self.addr = addr
        self.laddr = laddr
        self.conn = conn
        self.name = b""
        self.ctime = now_s
        self.atime = now_s
        self.last_cmd = b"NULL"
        self.authenticated = False
        self.user = None  # the disque.access.acl.User it runs commands as (Context.new_client)
        self.reply_mode = REPLY_ON
        self.monitor = False
        self.qbuf = 0
        self.lib_name = b""
        self.lib_ver = b""
        self.local = False  # connected from loopback or a Unix socket (disque.access.protection.is_local)
        self.no_evict = False  # CLIENT NO-EVICT on: never closed by maxmemory-clients


class Stats:
    """Counters reported by INFO stats; reset by CONFIG RESETSTAT."""

    __slots__ = ("connections", "commands", "net_in", "net_out", "rejected", "auth_failures", "auth_delayed",
                 "auth_refused", "bus_auth_failures", "evicted_clients", "ops_samples", "last_sample")

    def __init__(self):
        self.reset()

    def reset(self):
        self.connections = 0
        self.commands = 0
        self.net_in = 0
        self.net_out = 0
        self.rejected = 0
        self.auth_failures = 0  # wrong AUTH passwords (disque.access.failed_auth)
        self.auth_delayed = 0  # of which answered late (disque.access.failed_auth.Throttle)
        self.auth_refused = 0  # AUTHs refused unread: their source failed too often
        self.bus_auth_failures = 0  # failed cluster-password handshakes
        self.evicted_clients = 0  # closed by maxmemory-clients (disque.node.client_memory)
        # (ms, commands, net_in, net_out) samples for instantaneous rates.
        self.ops_samples = deque(maxlen=16)
        self.last_sample = 0

    def sample(self, now_ms: int):
        if now_ms - self.last_sample >= 100:
            self.last_sample = now_ms
            self.ops_samples.append((now_ms, self.commands, self.net_in, self.net_out))

    def rates(self):
        """(ops/sec, input kbps, output kbps) over the sampled window."""
        s = self.ops_samples
        if len(s) < 2:
            return 0, 0.0, 0.0
        t0, c0, i0, o0 = s[0]
        t1, c1, i1, o1 = s[-1]
        dt = (t1 - t0) / 1000.0 or 1.0
        return int((c1 - c0) / dt), (i1 - i0) / dt / 1024, (o1 - o0) / dt / 1024


class SlowLog:
    __slots__ = ("entries", "next_id")

    def __init__(self):
        self.entries = deque()
        self.next_id = 0

    def add(self, now_s, usec, argv, max_len):
        args = list(argv[:32])
        if len(argv) > 32:
            args[-1] = b"... (%d more arguments)" % (len(argv) - 31)
        args = [a if len(a) <= 128 else a[:128] + b"... (%d more bytes)" % (len(a) - 128) for a in args]
        self.entries.appendleft((self.next_id, now_s, usec, args))
        self.next_id += 1
        while len(self.entries) > max_len:
            self.entries.pop()


class LatencySeries:
    """One event of the latency monitor: the latest samples, at most one a
    second (the worst of that second), oldest first, and the all-time high."""

    __slots__ = ("samples", "max")

    LENGTH = 160  # samples kept, as the original

    def __init__(self):
        self.samples = deque(maxlen=self.LENGTH)  # [time_s, ms]
        self.max = 0

    def add(self, now_s: int, ms: int) -> None:
        if self.samples and self.samples[-1][0] == now_s:
            self.samples[-1][1] = max(self.samples[-1][1], ms)
            return
        self.samples.append([now_s, ms])
        self.max = max(self.max, ms)


class LatencyMonitor:
    """LATENCY: commands that took at least ``latency-monitor-threshold``
    ms (0: off), as the events ``command`` and ``fast-command`` (commands
    flagged fast), by name."""

    __slots__ = ("events",)

    def __init__(self):
        self.events = {}  # name (bytes) -> LatencySeries

    def add(self, event: bytes, now_s: int, ms: int) -> None:
        series = self.events.get(event)
        if series is None:
            series = self.events[event] = LatencySeries()
        series.add(now_s, ms)

    def reset(self, names=()) -> int:
        """Forget the named events (any case), or all; return how many."""
        wanted = {n.lower() for n in names}
        gone = [e for e in self.events if not wanted or e.lower() in wanted]
        for event in gone:
            del self.events[event]
        return len(gone)


class Context:
    """Everything a command handler may touch.  ``commands`` is the command
    table after ``rename-command``; ``slowlog_threshold`` (us) and
    ``latency_threshold`` (ms) follow their directives (read on every
    command, so kept here rather than looked up)."""

    def __init__(self, node, config, runtime):
        from . import renamed_table

        self.node = node
        self.config = config
        self.runtime = runtime
        self.commands = renamed_table(config["rename-command"])
        self.acl = acl_from_config(config, runtime.reactor.seconds if runtime is not None else None)
        self.clients = {}  # id -> ClientState
        self.stats = Stats()
        self.slowlog = SlowLog()
        self.latency = LatencyMonitor()
        self.monitors = []
        # The previous command's end within a run of commands, the next
        # one's start: see disque.commands.dispatcher.run_of_commands.
        self.clock = 0.0
        self.next_client_id = 1
        self.start_ms = node.now
        config.on_change("slowlog-log-slower-than", self._set_slowlog_threshold)
        config.on_change("latency-monitor-threshold", self._set_latency_threshold)

    def _set_slowlog_threshold(self, usec):
        self.slowlog_threshold = usec

    def _set_latency_threshold(self, ms):
        self.latency_threshold = ms

    def new_client(self, addr: bytes, conn, laddr: bytes = b"") -> ClientState:
        client = ClientState(self.next_client_id, addr, conn, self.node.now // 1000, laddr)
        self.next_client_id += 1
        self.clients[client.id] = client
        self.stats.connections += 1
        client.user = self.acl.default
        if not self.acl.auth_required:
            client.authenticated = True
        return client

    def drop_client(self, client: ClientState) -> None:
        self.clients.pop(client.id, None)
        self.node.getjob.unblock(client)
        if client.monitor:
            try:
                self.monitors.remove(client)
            except ValueError:
                pass
