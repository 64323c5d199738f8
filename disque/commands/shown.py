"""How clients and commands are shown to operators: CLIENT LIST's line
(:func:`client_line`), the client an ACL LOG entry names
(:func:`client_info`), and a command's arguments as MONITOR and the audit
log print them (:func:`quoted`, after :mod:`disque.commands.redact` has
hidden the secrets).  Nothing here is on a request's path unless the
request is shown."""


def client_line(ctx, c, now_s) -> bytes:
    flags = b"b" if ctx.node.getjob.is_blocked(c) else (b"O" if c.monitor else b"N")
    return b"id=%d addr=%s fd=%d name=%s age=%d idle=%d flags=%s qbuf=%d qbuf-free=%d obl=0 oll=0 omem=0 events=r cmd=%s\n" % (
        c.id, c.addr, c.id + 6, c.name, now_s - c.ctime, now_s - c.atime, flags, c.qbuf,
        max(32768 - c.qbuf, 0), c.last_cmd)


def client_info(ctx, client) -> bytes:
    """The client as CLIENT LIST shows it (for ACL LOG)."""
    return client_line(ctx, client, ctx.node.now // 1000).rstrip(b"\n")


def quoted(argv) -> bytes:
    """Arguments as MONITOR shows them: each quoted, escaped."""
    return b" ".join(b'"' + _repr(a) + b'"' for a in argv)


def _repr(arg: bytes) -> bytes:
    out = []
    for c in arg:
        if c in (34, 92):
            out.append(b"\\" + bytes((c,)))
        elif c == 10:
            out.append(b"\\n")
        elif c == 13:
            out.append(b"\\r")
        elif c == 9:
            out.append(b"\\t")
        elif 32 <= c < 127:
            out.append(bytes((c,)))
        else:
            out.append(b"\\x%02x" % c)
    return b"".join(out)
