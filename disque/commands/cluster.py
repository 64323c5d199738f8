"""Commands about the cluster as this node sees it: HELLO (the nodes and
their priorities, for clients choosing one) and CLUSTER (NODES, MYID,
INFO, LEAVING, FORGET, MEET, RESET, SAVECONFIG)."""

from ..resp import reply
from . import command
from .audit import audit_command
from .args import parse_ll, subcommand
from .jobs import SYNTAX


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
    return reply.array([reply.ONE, reply.bulk(node.my_id)] + entries)


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


CLUSTER_ARITY = {b"nodes": 2, b"myid": 2, b"info": 2, b"leaving": (2, 3), b"forget": 3, b"meet": 4, b"reset": 3,
                 b"saveconfig": 2}


@command("cluster", -2, "readonly admin")
def cluster(ctx, client, argv):
    node = ctx.node
    sub, fits = subcommand(argv, CLUSTER_ARITY)
    if not fits:
        return E_CLUSTER
    if sub == b"nodes":
        return reply.bulk(cluster_nodes_text(node))
    if sub == b"myid":
        return reply.bulk(node.my_id)
    if sub == b"info":
        c = node.cluster
        text = (b"cluster_state:ok\r\ncluster_known_nodes:%d\r\ncluster_reachable_nodes:%d\r\n"
                b"cluster_size:%d\r\ncluster_stats_messages_sent:%d\r\n"
                b"cluster_stats_messages_received:%d\r\n") % (
            len(c.nodes), c.reachable, c.size, c.sent, c.received)
        return reply.bulk(text)
    if sub == b"leaving":
        if len(argv) == 2:
            return b"+yes\r\n" if node.cluster.leaving else b"+no\r\n"
        value = argv[2].lower()
        if value not in (b"yes", b"no"):
            return reply.err(b"Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        node.cluster.set_leaving(value == b"yes")
        if node.cluster.leaving:
            from .queues import LEAVING

            node.getjob.unblock_all_with(LEAVING)
        return reply.OK
    if sub == b"forget":
        target = argv[2]
        if len(target) != 40 or not all(c in b"0123456789abcdef" for c in target):
            return reply.err(b"Invalid node identifier")
        if target == node.my_id:
            return reply.err(b"I tried hard but I can't forget myself...")
        if not node.cluster.forget(target, node.now):
            return reply.err(b"Unknown node " + target)
        audit_command(ctx, client, b"cluster", argv)
        return reply.OK
    if sub == b"meet":
        port = parse_ll(argv[3])
        if port is None:
            return reply.err(b"Invalid TCP port specified: " + argv[3])
        if not _valid_ip(argv[2]) or not 0 < port <= 65535 - 10000:
            return reply.err(b"Invalid node address specified: " + argv[2] + b":" + argv[3])
        node.cluster.meet(_normal_ip(argv[2]), port, node.now, explicit=True)
        audit_command(ctx, client, b"cluster", argv)
        return reply.OK
    if sub == b"reset":
        how = argv[2].lower()
        if how not in (b"hard", b"soft"):
            raise SYNTAX
        node.cluster_reset(how == b"hard")
        audit_command(ctx, client, b"cluster", argv)
        return reply.OK
    if sub == b"saveconfig":
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
