"""Parser for the golden transcripts of the original Disque server
(/work/shared/reference/*.md; the block format is described in README.md
there) plus a small typed RESP reader used to compare replies.

A transcript file is a sequence of blocks::

    **optional short title**
    ```
    [node tag] > COMMAND arg arg
    sent:  b'...'
    reply: (N bytes[, note, note])
      b'...\\r\\n'
      b'...\\r\\n'
    ```

``parse_file`` returns them as :class:`Block` records in file order, each
knowing the ``##`` / ``###`` headings it sits under and the prose lines in
parentheses that appear between the previous block and itself (e.g. "(30 more
queues ... created ..., not shown)"), so that a replayer can act on them.
"""

import ast
import os
import re
from dataclasses import dataclass, field

REFERENCE_DIR = os.environ.get("DISQUE_GOLDEN_DIR", "/work/shared/reference")


@dataclass
class Block:
    file: str
    index: int  # 0-based position in the file
    line: int  # 1-based line of the "> command" line
    section: str  # current "## " heading ("" before the first one)
    subsection: str  # current "### " heading under that section, or ""
    title: str | None  # **title** just before the block
    tag: str | None  # "[tag] > ..." (node or connection), None if untagged
    command: str  # the command as typed (after "> ")
    sent: bytes  # exact bytes written (expanded when the file truncates it)
    sent_truncated: bool
    reply: bytes  # whole reply (concatenation of the indented literals)
    reply_len: int  # N of "(N bytes, ...)"
    notes: list[str] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)  # "(...)" lines since the previous block

    # -- notes ------------------------------------------------------------

    @property
    def arrived_after(self) -> float | None:
        for n in self.notes:
            m = re.fullmatch(r"arrived after ([0-9.]+)s", n)
            if m:
                return float(m.group(1))
        return None

    @property
    def nothing_more_within(self) -> float | None:
        for n in self.notes:
            m = re.fullmatch(r"nothing more within ([0-9.]+)s, connection open", n)
            if m:
                return float(m.group(1))
        return None

    @property
    def closed_by_server(self) -> bool:
        return "connection closed by server" in self.notes

    @property
    def n_replies(self) -> int:
        for n in self.notes:
            m = re.fullmatch(r"(\d+) replies", n)
            if m:
                return int(m.group(1))
        return 1 if self.reply else 0

    @property
    def where(self) -> str:
        return "%s:%d" % (self.file, self.line)

    @property
    def label(self) -> str:
        t = " **%s**" % self.title if self.title else ""
        tag = "[%s] " % self.tag if self.tag else ""
        return "%s%s %s> %s" % (self.where, t, tag, self.command)


_COMMAND = re.compile(r"^(?:\[(?P<tag>[^\]]+)\] )?> (?P<cmd>.*)$")
_SENT = re.compile(r"^sent:  (?P<lit>b(?:'.*'|\".*\"))(?:\.\.\. \((?P<n>\d+) bytes\))?$")
_REPLY = re.compile(r"^reply: \((?P<n>\d+) bytes(?:, (?P<notes>.*))?\)$")
_TITLE = re.compile(r"^\*\*(?P<title>.+)\*\*$")


class ParseError(ValueError):
    pass


def _literal(text: str, where: str) -> bytes:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise ParseError("%s: bad bytes literal %r: %s" % (where, text, e))
    if not isinstance(value, bytes):
        raise ParseError("%s: not a bytes literal: %r" % (where, text))
    return value


def _parse_block(lines, start, file, where_line):
    """Parse the body lines of one fenced block (without the fences)."""
    where = "%s:%d" % (file, where_line)
    if len(lines) < 3:
        raise ParseError("%s: block too short" % where)
    m = _COMMAND.match(lines[0])
    if not m:
        raise ParseError("%s: no '> command' line: %r" % (where, lines[0]))
    tag, cmd = m.group("tag"), m.group("cmd")
    s = _SENT.match(lines[1])
    if not s:
        raise ParseError("%s: no 'sent:' line: %r" % (where, lines[1]))
    sent = _literal(s.group("lit"), where)
    truncated = s.group("n") is not None
    if truncated:
        # "b'AAAA'... (65546 bytes)": the file shows a prefix only; the rest
        # repeats the prefix's last byte (as the README's examples do).
        n = int(s.group("n"))
        if not sent or n < len(sent):
            raise ParseError("%s: bad truncated sent" % where)
        sent = sent + sent[-1:] * (n - len(sent))
    r = _REPLY.match(lines[2])
    if not r:
        raise ParseError("%s: no 'reply:' line: %r" % (where, lines[2]))
    reply_len = int(r.group("n"))
    notes = [x.strip() for x in r.group("notes").split(",")] if r.group("notes") else []
    # "nothing more within 1.5s, connection open" was split on the comma.
    merged = []
    for x in notes:
        if x == "connection open" and merged and merged[-1].startswith("nothing more within"):
            merged[-1] += ", connection open"
        else:
            merged.append(x)
    parts = []
    for raw in lines[3:]:
        if not raw.startswith("  "):
            raise ParseError("%s: unexpected line in reply: %r" % (where, raw))
        parts.append(_literal(raw.strip(), where))
    reply = b"".join(parts)
    if len(reply) != reply_len:
        raise ParseError("%s: reply is %d bytes, header says %d" % (where, len(reply), reply_len))
    return Block(file=file, index=0, line=where_line, section="", subsection="", title=None,
                 tag=tag, command=cmd, sent=sent, sent_truncated=truncated, reply=reply,
                 reply_len=reply_len, notes=merged)


def parse_text(text: str, file: str = "<text>", stop_at: str | None = None) -> list:
    """Blocks of one transcript, in order.  ``stop_at``: stop before the
    first ``## `` heading that starts with this text."""
    blocks = []
    section = subsection = ""
    title = None
    prose = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r")
        if line.startswith("## "):
            if stop_at is not None and line[3:].startswith(stop_at):
                break
            section, subsection, title = line[3:].strip(), "", None
        elif line.startswith("### "):
            subsection, title = line[4:].strip(), None
        elif _TITLE.match(line):
            title = _TITLE.match(line).group("title")
        elif line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                raise ParseError("%s:%d: unterminated block" % (file, i + 1))
            block = _parse_block([x.rstrip("\r") for x in lines[i + 1:j]], i + 1, file, i + 2)
            block.index = len(blocks)
            block.section, block.subsection, block.title = section, subsection, title
            block.prose, prose = prose, []
            blocks.append(block)
            title = None
            i = j
        elif line.startswith("(") and line.endswith(")"):
            prose.append(line[1:-1])
        i += 1
    return blocks


def parse_file(name: str, stop_at: str | None = None, directory: str = REFERENCE_DIR) -> list:
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        return parse_text(f.read(), name, stop_at)


# ----------------------------------------------------------------------
# Typed RESP values: ("+", bytes) ("-", bytes) (":", int) ("$", bytes|None)
# ("*", list|None).  Unlike hiredis this keeps status apart from bulk.
# ----------------------------------------------------------------------

class Incomplete(Exception):
    pass


def parse_reply(buf: bytes, pos: int = 0):
    """One reply at ``pos``: ``(value, end)``; raises Incomplete or
    ValueError (malformed)."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        raise Incomplete()
    kind = buf[pos:pos + 1]
    line = buf[pos + 1:eol]
    end = eol + 2
    if kind in (b"+", b"-"):
        return (kind.decode(), line), end
    if kind == b":":
        return (":", int(line)), end
    if kind == b"$":
        n = int(line)
        if n < 0:
            return ("$", None), end
        if len(buf) < end + n + 2:
            raise Incomplete()
        if buf[end + n:end + n + 2] != b"\r\n":
            raise ValueError("bulk not followed by CRLF")
        return ("$", buf[end:end + n]), end + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return ("*", None), end
        items = []
        for _ in range(n):
            item, end = parse_reply(buf, end)
            items.append(item)
        return ("*", items), end
    raise ValueError("bad RESP type byte %r" % kind)


def parse_replies(buf: bytes) -> list:
    """Every complete reply in ``buf`` (raises ValueError on leftovers)."""
    out = []
    pos = 0
    while pos < len(buf):
        try:
            value, pos = parse_reply(buf, pos)
        except Incomplete:
            raise ValueError("incomplete reply at byte %d" % pos)
        out.append(value)
    return out


def encode(value) -> bytes:
    kind, v = value
    if kind in ("+", "-"):
        return kind.encode() + v + b"\r\n"
    if kind == ":":
        return b":%d\r\n" % v
    if kind == "$":
        return b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v)
    if kind == "*":
        if v is None:
            return b"*-1\r\n"
        return b"*%d\r\n" % len(v) + b"".join(encode(x) for x in v)
    raise ValueError(kind)


def encode_command(argv) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def split_requests(data: bytes) -> list:
    """Best-effort split of raw request bytes into argv lists (RESP arrays
    and inline commands, as the server reads them); used to know which
    command each pipelined reply answers.  Empty requests are dropped."""
    out = []
    try:
        _split(data, out)
    except ValueError:  # a protocol error: the server stops there too
        pass
    return out


def _split(data, out):
    pos = 0
    while pos < len(data):
        if data[pos:pos + 1] == b"*":
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                break
            n = int(data[pos + 1:eol])
            pos = eol + 2
            argv = []
            for _ in range(max(n, 0)):
                eol = data.find(b"\r\n", pos)
                ln = int(data[pos + 1:eol])
                argv.append(data[eol + 2:eol + 2 + ln])
                pos = eol + 2 + ln + 2
            if argv:
                out.append(argv)
        else:
            eol = data.find(b"\n", pos)
            if eol < 0:
                break
            words = data[pos:eol].rstrip(b"\r").split()
            if words:
                out.append(words)
            pos = eol + 1
