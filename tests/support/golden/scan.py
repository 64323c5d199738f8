"""SCAN replay: a QSCAN / JSCAN iteration compared as a whole.

The original's cursors are its own and its order is its hash tables', so a
SCAN block is not compared byte for byte.  The block and the blocks that
continue its iteration with the original's cursors form a group; we follow
our own cursors instead, and compare the set of names / IDs of the whole
iteration (and of a full scan of ours), the shape and RESP types of every
reply, and, for ``REPLY all``, every job record of ours against the
original's (:func:`golden.normalize.check_job_record`).  Jobs the
transcript created off-screen ("not shown") match ours one to one.

The functions take the replayer (``golden.replayer.Replayer``) as ``r``:
they append its results and use its identity maps.
"""

from .known import KNOWN_SCAN_MISSING, known_key
from .normalize import UINT, check_job_record
from .originals import JOB_ID_FULL
from .resp import encode_command, parse_reply, split_requests
from .result import Result

SCAN_OPTIONS = {b"count": 1, b"minlen": 1, b"maxlen": 1, b"importrate": 1, b"queue": 1,
                b"state": 1, b"reply": 1, b"busyloop": 0}


def scan_cursor_index(argv):
    i = 1
    while i < len(argv):
        n = SCAN_OPTIONS.get(argv[i].lower())
        if n is not None and i + n < len(argv):
            i += 1 + n
            continue
        return i
    return None


def scan_parts(value):
    """(cursor, items) of a well-formed SCAN reply, else None."""
    if value[0] != "*" or value[1] is None or len(value[1]) != 2:
        return None
    cur, items = value[1]
    if cur[0] != "$" or cur[1] is None or not UINT.match(cur[1]) or items[0] != "*" or items[1] is None:
        return None
    if int(cur[1]) >= 1 << 64:
        return None
    return cur[1], items[1]


def scan_key(item):
    """Name / ID of a SCAN item (REPLY all: the record's id field)."""
    if item[0] == "*":
        return item[1][1][1]
    return item[1]


def is_scan(block, argvs):
    """A QSCAN / JSCAN block whose captured reply is a well-formed SCAN reply."""
    if len(argvs) != 1 or argvs[0][0].upper() not in (b"QSCAN", b"JSCAN"):
        return False
    exp, _ = parse_reply(block.reply)
    return scan_parts(exp) is not None


def scan_group(r, block, argv):
    """The block and the following ones that continue its iteration
    with the original's cursors."""
    group = [block]
    ci = scan_cursor_index(argv)
    rest = argv[:ci] + argv[ci + 1:] if ci is not None else argv
    cursor = scan_parts(parse_reply(block.reply)[0])[0]
    for nxt in r.blocks[block.index + 1:]:
        if cursor == b"0":
            break
        nargv = split_requests(r.map_ids(nxt.sent))
        if len(nargv) != 1 or nargv[0][0] != argv[0]:
            break
        nci = scan_cursor_index(nargv[0])
        if nci is None or nargv[0][nci] != cursor or nargv[0][:nci] + nargv[0][nci + 1:] != rest:
            break
        exp = scan_parts(parse_reply(nxt.reply)[0])
        if exp is None:
            break
        group.append(nxt)
        cursor = exp[0]
    return group, cursor == b"0"


def scan_all(conn, argv, cursor=b"0"):
    """Follow our cursors from ``cursor`` to 0 with ``argv``'s options;
    (items, problems)."""
    ci = scan_cursor_index(argv)
    base = argv[:ci] + argv[ci + 1:] if ci is not None else list(argv)
    items = []
    for _ in range(10000):
        value = conn.call(*(base[:1] + [cursor] + base[1:]))
        parts = scan_parts(value)
        if parts is None:
            return items, ["bad SCAN reply %r" % (value,)]
        cursor, got = parts
        items += got
        if cursor == b"0":
            return items, []
    return items, ["SCAN did not terminate"]


def replay_scan(r, block, conn, argv):
    """Replay the SCAN group starting at ``block`` on ``conn``; one Result
    per block of the group."""
    group, complete = scan_group(r, block, argv)
    ci = scan_cursor_index(argv)
    start_cursor = argv[ci] if ci is not None else b"0"
    fresh = start_cursor == b"0"
    our_cursor = None
    our_items = []
    exp_items = []
    for i, b in enumerate(group):
        r.consumed.add(b.index)
        (exp,), expected = r.expected(b)
        exp_cursor, items = scan_parts(exp)
        exp_items += items
        if i == 0:
            sent = r.map_sent(b)
        elif our_cursor is None:
            r.results.append(Result(b, "MISMATCH", "not replayed: the iteration failed before",
                                    expected, b"", b""))
            continue
        elif our_cursor == b"0":
            # Our iteration ended before the original's: nothing to send.
            r.results.append(Result(b, "normalized", "covered by the iteration of %s" % block.where,
                                    expected, b"", b""))
            continue
        else:
            bargv = split_requests(r.map_ids(b.sent))[0]
            bci = scan_cursor_index(bargv)
            bargv[bci] = our_cursor
            sent = encode_command(bargv)
        conn.send(sent)
        raw, values, problem = conn.read_replies(1)
        problems = []
        ours = scan_parts(values[0]) if values else None
        if problem or ours is None:
            problems.append("bad SCAN reply (%s)" % problem)
            our_cursor = None
        else:
            our_cursor, got = ours
            our_items += got
            kinds = {x[0] for x in items + got}
            if len(kinds) > 1:
                problems.append("item types differ: %r" % kinds)
        status = "exact" if raw == expected else "normalized"
        r.results.append(Result(b, "MISMATCH" if problems else status, "; ".join(problems),
                                expected, raw, sent))
    last = r.results[-1]
    if our_cursor is None:
        return
    problems = []
    if our_cursor != b"0":
        more, p = scan_all(conn, argv, our_cursor)
        our_items += more
        problems += p
    universe, p = scan_all(conn, argv)
    problems += p
    key = known_key(block)
    if key in KNOWN_SCAN_MISSING:
        missing = KNOWN_SCAN_MISSING[key](r)
        exp_items = [x for x in exp_items if scan_key(x) not in missing]
        if missing & {scan_key(x) for x in our_items + universe}:
            problems.append("listed in KNOWN_DIFFERENCES (%s) but %r is there" % (key, sorted(missing)))
    if complete and fresh:
        problems += compare_item_sets(r, exp_items, our_items, "iteration")
        problems += compare_item_sets(r, exp_items, universe, "full scan")
    else:
        # A partial iteration (the original stopped, or started at an
        # arbitrary cursor): both sides must be part of the full scan.
        problems += compare_item_sets(r, exp_items, universe, "full scan", subset=True)
        ours, full = {scan_key(x) for x in our_items}, {scan_key(x) for x in universe}
        if not ours <= full or (fresh and ours != full):
            problems.append("our iteration %r does not match our full scan %r" % (
                sorted(ours), sorted(full)))
    problems += check_scan_records(r, exp_items, our_items)
    if problems:
        last.status = "MISMATCH"
        last.detail = "; ".join(filter(None, [last.detail] + problems))
    elif key in KNOWN_SCAN_MISSING:
        r.known_used.add(key)
        for res in r.results[-len(group):]:
            res.status = "known"


def compare_item_sets(r, exp_items, our_items, what, subset=False):
    ek = {scan_key(x) for x in exp_items}
    ok = {scan_key(x) for x in our_items}
    unknown = {k for k in ek if JOB_ID_FULL.match(k) and k not in r.idmap.values()
               and k[2:10] != r.my_id[:8]}
    ek -= unknown
    extra = ok - ek
    if subset:
        if not ek <= ok:
            return ["%s: missing %r" % (what, sorted(ek - ok))]
        return []
    problems = []
    if ek - ok:
        problems.append("%s: missing %r" % (what, sorted(ek - ok)))
    if len(extra) != len(unknown) or not extra <= r.anon:
        problems.append("%s: %d unexpected items %r (the original had %d jobs we only know as "
                        "'not shown')" % (what, len(extra), sorted(extra - r.anon), len(unknown)))
    return problems


def check_scan_records(r, exp_items, our_items):
    """JSCAN REPLY all: every record of ours against the original's."""
    exp_records = {scan_key(x): x for x in exp_items if x[0] == "*"}
    problems = []
    for o in our_items:
        if o[0] == "*" and scan_key(o) in exp_records:
            problems += check_job_record(exp_records[scan_key(o)], o, r)
    return problems
