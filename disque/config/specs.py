"""Every directive of ``disque.conf``, one :class:`~disque.config.kinds.Spec`
row each (``SPECS``, in CONFIG GET order of the original server; then the
project's own; then the directives the original reads from the file but does
not list), with the checks and CONFIG SET parsers particular to some of them,
and which directives hold secrets.  docs/config.md says what each does."""

import errno
import gc
import ipaddress
import os
import re
import shlex
import stat

from .errors import InvalidValue, require
from .kinds import CLIENT_CLASSES, INT32_MAX, KINDS, Spec, yes_no
from .lexer import to_bytes, to_text


def _dir_problem(path):
    try:
        if not stat.S_ISDIR(os.stat(path).st_mode):
            return os.strerror(errno.ENOTDIR)
    except (OSError, ValueError) as e:
        return getattr(e, "strerror", None) or str(e)
    return None


def _check_dir(path):
    """``dir`` must be a directory already: the node does not make it (a
    mistyped path would start a new node, with a new ID and no AOF, which
    its seeds would then join to the cluster).  Make it first, with the
    owner and mode it needs (docs/cluster.md)."""
    problem = _dir_problem(path)
    if problem == os.strerror(errno.ENOENT):
        problem += ": make it first (mkdir -p %s); the node does not create its dir" % shlex.quote(path)
    return require(not problem, "can't use it as working directory: %s" % problem)


def _check_logfile(path):
    """The file must be writable, or creatable in an existing directory (the
    original opens it for appending; this checks without creating it)."""
    if path:
        parent = os.path.dirname(os.path.abspath(path))
        problem = os.strerror(errno.EISDIR) if os.path.isdir(path) else _dir_problem(parent)
        if not problem and not os.access(path if os.path.exists(path) else parent, os.W_OK):
            problem = os.strerror(errno.EACCES)
        require(not problem, "can't open the log file: %s" % problem)
    return True


def _check_log_tag(text):
    """``log-tag``: printable, short, with no braces but those of
    ``{port}`` and ``{id}`` (disque.io.logs)."""
    require(len(text) <= 64, "must be at most 64 characters long")
    require(text.isprintable(), "must be printable (no newline or control character)")
    rest = re.sub(r"\{(?:port|id)\}", "", text)
    require("{" not in rest and "}" not in rest,
            "may hold {port} (the node's port) and {id} (its short ID), and no other brace")
    return True


def _set_output_limits(spec, text, cur):
    words = text.split(" ") if text else []
    if len(words) % 4:
        raise InvalidValue("need <class> <hard> <soft> <seconds> groups")
    new = dict(cur)
    for k in range(0, len(words), 4):
        cls, nums = words[k].lower(), words[k + 1:k + 4]
        if cls not in CLIENT_CLASSES or not all(re.fullmatch("[0-9]+", w) for w in nums):
            raise InvalidValue("bad group")
        new[cls] = tuple(int(w) for w in nums)
    return new


def _set_words(spec, text, cur):
    """CONFIG SET of a list directive: its words, space separated."""
    return KINDS[spec.kind].parse(spec, text.split(), cur)


def _check_host_name(text):
    """An ``http-allowed-hosts`` word: ``*`` or a host name as a Host
    header carries it, without the port."""
    return require(text == "*" or re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", text),
                   "'%s' is not a host name: letters, digits, '.', '-', '_' and no port (or * for any)" % text)


_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def parse_seed(text):
    """A ``cluster-seeds`` word, ``host:port`` (IPv6 in brackets:
    ``[::1]:7711``), as ``(host, port)``: an IP address in its normal form
    or a host name in lower case, and a client port whose bus port (+ 10000)
    exists.  Raises InvalidValue saying what it must be."""
    host, sep, port = text.rpartition(":")
    problem = "'%s' is not host:port (a client port, as CLUSTER MEET takes; IPv6 in brackets: [::1]:7711)" % text
    require(sep and host and re.fullmatch("[0-9]{1,5}", port), problem)
    require(0 < int(port) <= 65535 - 10000, "'%s': the port must be 1..55535 (its bus port, + 10000, must exist)"
            % text)
    if host.startswith("[") and host.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(host[1:-1])), int(port)
        except ValueError:
            raise InvalidValue(problem) from None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        require(_HOST_NAME.fullmatch(host) and not re.fullmatch(r"[0-9.]+", host), problem)
        return host.lower().rstrip("."), int(port)
    require(address.version == 4, problem)  # an IPv6 address without brackets: where does the port start?
    return str(address), int(port)


def _set_keepalive(spec, text, cur):
    """CONFIG SET tcp-keepalive takes yes/no, as the original (whose CONFIG GET
    shows yes/no): yes keeps the interval set in the file, or 300 s."""
    on = KINDS["bool"].parse(spec, [text], cur)
    return (cur or 300) if on else 0


#: tls-protocols words (case-insensitive), oldest first; "" means the default.
TLS_PROTOCOLS = ("tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3")
TLS_DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"


def tls_protocol_range(text):
    """``(lowest, highest)``: indexes in TLS_PROTOCOLS of the versions
    ``tls-protocols`` names (as Redis: case-insensitive, space separated).
    They must be consecutive: OpenSSL takes a minimum and a maximum."""
    words = [w.lower() for w in (text or TLS_DEFAULT_PROTOCOLS).split()]
    unknown = [w for w in words if w not in TLS_PROTOCOLS]
    require(words and not unknown, "versions are TLSv1, TLSv1.1, TLSv1.2 and TLSv1.3")
    indexes = sorted({TLS_PROTOCOLS.index(w) for w in words})
    require(indexes == list(range(indexes[0], indexes[-1] + 1)), "the versions must be consecutive")
    return indexes[0], indexes[-1]


_GC_FREEZE = hasattr(gc, "freeze")  # CPython's (disque/node/heap.py); PyPy has none
_TCP_ONLY = "this node listens on TCP only"
Spec = Spec
# In CONFIG GET order of the original server; then the project's own; then the
# directives the original reads from the file but does not list in CONFIG GET.
SPECS = (
    Spec("requirepass", "str", "", True, nullable=True,
         check=lambda t: require(len(to_bytes(t)) <= 512, "must be at most 512 bytes long")),
    Spec("unixsocket", "str", "", nullable=True, fixed=_TCP_ONLY),
    Spec("logfile", "str", "", check=_check_logfile),
    Spec("pidfile", "str", "/var/run/disque.pid",
         fixed="twistd writes the pid file: use twistd --pidfile <path>"),
    Spec("maxmemory", "mem", 1024 ** 3, True, lo=1),
    Spec("maxmemory-samples", "int", 5, lo=1, hi=INT32_MAX,
         fixed="eviction does not sample: it frees what no guarantee needs, oldest first"),
    Spec("timeout", "int", 0, True, lo=0, hi=INT32_MAX),
    Spec("auto-aof-rewrite-percentage", "int", 100, True, lo=0, hi=INT32_MAX),
    Spec("auto-aof-rewrite-min-size", "mem", 64 * 1024 ** 2, True, lo=0),
    Spec("slowlog-log-slower-than", "int", 10000, True),
    Spec("latency-monitor-threshold", "int", 0, True, lo=0),
    Spec("slowlog-max-len", "int", 128, True, lo=0, hi=2 ** 32 - 1),
    Spec("port", "int", 7711, lo=0, hi=65535),
    Spec("tcp-backlog", "int", 511, lo=0, hi=INT32_MAX),
    Spec("databases", "int", 16, lo=1, hi=INT32_MAX, fixed="Disque has no databases"),
    Spec("maxclients", "int", 10000, True, lo=1, hi=INT32_MAX),
    Spec("watchdog-period", "int", 0, True, lo=0),
    Spec("hz", "int", 10, True, lo=1, hi=500, clamp=True),
    Spec("cluster-node-timeout", "int", 15000, True, lo=1),
    Spec("tcp-keepalive", "int", 0, True, lo=0, hi=INT32_MAX, show=yes_no,     # yes/no, as the original
         runtime=_set_keepalive),
    Spec("no-appendfsync-on-rewrite", "bool", False, True),
    Spec("daemonize", "bool", False,
         fixed="twistd runs the node in the background unless given -n"),
    Spec("activerehashing", "bool", True,
         fixed="the node's hash tables (Python dicts) resize at once: there is no rehashing to do"),
    Spec("aof-rewrite-incremental-fsync", "bool", True, True),
    Spec("aof-load-truncated", "bool", True, True),
    Spec("aof-enqueue-jobs-once", "bool", False, True),
    Spec("maxmemory-policy", "enum", "acks", True, choices=("acks", "noeviction")),
    Spec("loglevel", "enum", "notice", True, choices=("debug", "verbose", "notice", "warning")),
    Spec("appendfsync", "enum", "everysec", True, choices=("everysec", "always", "no")),
    Spec("syslog-facility", "enum", "local0",
         choices=("user",) + tuple("local%d" % n for n in range(8))),
    Spec("appendonly", "bool", False, True),
    Spec("dir", "str", ".", show=os.path.abspath, check=_check_dir),
    Spec("client-output-buffer-limit", "obl", {"normal": (0, 0, 0)}, True, runtime=_set_output_limits),
    Spec("unixsocketperm", "octal", 0, fixed=_TCP_ONLY),
    Spec("bind", "list", ["127.0.0.1"]),
    Spec("federation-policy", "str", "default", original=False,
         check=lambda t: require(t, "must not be empty")),
    Spec("persistence", "str", "aof", original=False,
         check=lambda t: require(t, "must not be empty")),
    Spec("listen", "endpoints", [], original=False),
    Spec("cluster-listen", "endpoints", [], original=False),
    Spec("cluster-connect", "str", "", original=False, nullable=True),
    Spec("gc-freeze-interval", "int", 1 if _GC_FREEZE else 0, original=False, lo=0, hi=86400,
         fixed="" if _GC_FREEZE else "this runtime's collector has no gc.freeze and needs none "
         "(PyPy's major collections are incremental)"),
    Spec("dedup-window", "int", 600, True, original=False, lo=0, hi=30 * 86400),
    Spec("max-deliveries", "int", 0, True, original=False, lo=0, hi=(1 << 32) - 1),
    Spec("output-flush", "enum", "turn", True, original=False, choices=("read", "turn")),
    # Which node wrote a line (disque.io.logs): "" none, else a text with
    # {port} and {id} standing for the node's port and short ID.
    Spec("log-tag", "str", "", True, original=False, nullable=True, check=_check_log_tag),
    # What a load does with damaged AOF records (disque.persistence.scan):
    # refuse to start, or start without them (their jobs come back from the
    # nodes holding copies).
    Spec("aof-load-damaged", "enum", "refuse", True, original=False, choices=("refuse", "skip")),
    # Who may connect and run DEBUG (disque/access/protection.py, docs/security.md),
    # as Redis 7: protected mode, and DEBUG from local connections only.
    Spec("protected-mode", "bool", True, True, original=False),
    Spec("enable-debug-command", "enum", "local", original=False, choices=("no", "local", "yes")),
    # Users and their permissions (disque/access/acl.py, docs/security.md): "user"
    # lines or an aclfile (relative to dir), never both.
    Spec("user", "users", [], get=False, original=False),
    Spec("aclfile", "str", "", original=False, nullable=True),
    Spec("acllog-max-len", "int", 128, True, original=False, lo=0, hi=INT32_MAX),
    Spec("cluster-password", "str", "", True, original=False, nullable=True,
         check=lambda t: require(len(to_bytes(t)) <= 512, "must be at most 512 bytes long")),
    # A bus reachable beyond loopback needs cluster-password or tls-cluster,
    # unless this says anyone who can reach it may be a member
    # (disque.node.listeners.open_bus_refusal, docs/security.md).
    Spec("cluster-trusted-network", "bool", False, original=False),
    # Nodes to join by themselves, as client addresses host:port
    # (disque.core.seeds, docs/cluster.md); CONFIG SET tries the new list.
    Spec("cluster-seeds", "list", [], True, original=False, check=lambda t: parse_seed(t) and True,
         runtime=_set_words),
    # TLS (disque/node/tls.py, docs/security.md), in Redis' words; CONFIG SET of
    # the settable ones reloads the certificates for new connections.
    # The HTTP side (disque/http/, docs/observability.md): off while
    # http-port is 0; http-frontend names the strategy serving it.
    Spec("http-port", "int", 0, original=False, lo=0, hi=65535),
    Spec("http-bind", "str", "127.0.0.1", original=False),
    Spec("http-frontend", "str", "default", original=False, check=lambda t: require(t, "must not be empty")),
    Spec("http-tls", "bool", False, original=False),
    # Host header names the HTTP side answers to besides localhost, IP
    # addresses and http-bind (disque/http/access.py); "*": any.
    Spec("http-allowed-hosts", "list", [], True, original=False, check=_check_host_name, runtime=_set_words),
    Spec("metrics-max-queues", "int", 50, True, original=False, lo=0, hi=100000),
    Spec("tls-port", "int", 0, original=False, lo=0, hi=65535),
    Spec("tls-cert-file", "str", "", True, original=False, nullable=True),
    Spec("tls-key-file", "str", "", True, original=False, nullable=True),
    Spec("tls-ca-cert-file", "str", "", True, original=False, nullable=True),
    Spec("tls-ca-cert-dir", "str", "", True, original=False, nullable=True),
    Spec("tls-auth-clients", "enum", "yes", True, original=False, choices=("yes", "no", "optional")),
    # A TLS client certificate's CN names the user the client runs as
    # (Redis 8's directive; "cn" or "off").
    Spec("tls-auth-clients-user", "enum", "off", True, original=False, choices=("off", "cn")),
    Spec("tls-cluster", "bool", False, original=False),
    Spec("tls-protocols", "str", "", True, original=False, nullable=True,
         check=lambda t: tls_protocol_range(t) and True),
    Spec("tls-ciphers", "str", "", True, original=False, nullable=True),
    Spec("tls-ciphersuites", "str", "", True, original=False, nullable=True),
    # Limits of later Redis versions (docs/limits.md): the query buffer and
    # bulk limits of Redis 4, the bus send buffer limit of Redis 7.  A bulk
    # must fit a bus frame (disque.bus.protocol.MAX_FRAME): 512 MB at most.
    Spec("client-query-buffer-limit", "mem", 1024 ** 3, True, original=False, lo=1024 ** 2),
    # Redis 7: what all clients together may hold (disque/node/client_memory.py).
    Spec("maxmemory-clients", "share", 0, True, original=False, lo=0),
    Spec("proto-max-bulk-len", "mem", 512 * 1024 ** 2, True, original=False, lo=1024 ** 2,
         hi=512 * 1024 ** 2),
    Spec("cluster-link-sendbuf-limit", "mem", 256 * 1024 ** 2, True, original=False, lo=0),
    Spec("syslog-enabled", "bool", False, get=False),
    Spec("syslog-ident", "str", "disque", get=False),
    Spec("appendfilename", "str", "disque.aof", get=False,
         check=lambda t: require("/" not in t and "\\" not in t, "must be a file name, not a path")),
    Spec("cluster-config-file", "str", "nodes.conf", get=False),
    Spec("rename-command", "pairs", [], get=False, rewrite=False),
)
SPECS_BY_NAME = {s.name: s for s in SPECS}
#: Directives whose values are secrets: MONITOR, the slow log and the audit
#: lines never show them (disque.commands.redact).  Every directive whose
#: name says "pass" must be here (tests/protocol/test_access.py checks).
SECRETS = frozenset(("requirepass", "cluster-password"))


def is_secret(name: bytes) -> bool:
    """Whether the directive ``name`` (any case) holds a secret."""
    return to_text(name.lower()) in SECRETS
