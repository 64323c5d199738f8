"""The golden transcripts of the original Disque server, parsed.

/work/shared/reference/*.md (the block format is described in README.md
there) are sequences of blocks::

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
:data:`FILES` lists the transcripts the replay covers, in the order they run.
"""

import ast
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

REFERENCE_DIR = os.environ.get("DISQUE_GOLDEN_DIR", "/work/shared/reference")

# The transcripts replayed, in order: (file, stop_at) for parse_file.
# cluster.md: the single node part, then the 3-node sections on three more
# nodes.
FILES = [
    ("jobs.md", None),
    ("getjob.md", None),
    ("queues.md", None),
    ("scan-pause.md", None),
    ("admin.md", None),
    ("errors.md", None),
    ("cluster.md", None),
]


@dataclass
class Block:
    file: str
    index: int  # 0-based position in the file
    line: int  # 1-based line of the "> command" line
    section: str  # current "## " heading ("" before the first one)
    subsection: str  # current "### " heading under that section, or ""
    title: Optional[str]  # **title** just before the block
    tag: Optional[str]  # "[tag] > ..." (node or connection), None if untagged
    command: str  # the command as typed (after "> ")
    sent: bytes  # exact bytes written (expanded when the file truncates it)
    sent_truncated: bool
    reply: bytes  # whole reply (concatenation of the indented literals)
    reply_len: int  # N of "(N bytes, ...)"
    notes: List[str] = field(default_factory=list)
    prose: List[str] = field(default_factory=list)  # "(...)" lines since the previous block

    # -- notes ------------------------------------------------------------

    @property
    def arrived_after(self) -> Optional[float]:
        for n in self.notes:
            m = re.fullmatch(r"arrived after ([0-9.]+)s", n)
            if m:
                return float(m.group(1))
        return None

    @property
    def nothing_more_within(self) -> Optional[float]:
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


def parse_text(text: str, file: str = "<text>", stop_at: Optional[str] = None) -> list:
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


def parse_file(name: str, stop_at: Optional[str] = None, directory: str = REFERENCE_DIR) -> list:
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        return parse_text(f.read(), name, stop_at)


