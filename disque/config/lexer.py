"""The words of a config line as Redis writes them: argument splitting
(sdssplitargs), the quoting that reads back unchanged (sdscatrepr), memory
sizes with units, and the bytes <-> str conversion the store uses for
directive arguments (UTF-8 with surrogate escapes: any byte survives the
round trip).  Invariant: ``split_args(quote(b)) == [b]`` for every ``b``."""

import re

from .errors import InvalidValue


_BLANK = b" \t\n\r\v\f"
_ENDS_WORD = b" \t\n\r"
_HEX = b"0123456789abcdefABCDEF"
_UNESCAPE = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_ESCAPE = {10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b", 92: b"\\\\", 34: b'\\"'}


def split_args(line: bytes) -> "list[bytes] | None":
    """Split one line like Redis' sdssplitargs: "double quotes" with \\xHH \\n \\r
    \\t \\b \\a escapes, 'single quotes' with \\' only.  None on bad quoting."""
    args, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in _BLANK:
            i += 1
        if i >= n:
            return args
        cur, quote_char = bytearray(), 0
        while True:
            c = line[i] if i < n else None
            if quote_char and c is None:
                return None                               # unterminated quotes
            if quote_char == 34 and c == 92 and i + 3 < n and line[i + 1] == 120 \
                    and line[i + 2] in _HEX and line[i + 3] in _HEX:
                cur.append(int(line[i + 2:i + 4], 16))
                i += 3
            elif quote_char == 34 and c == 92 and i + 1 < n:
                i += 1
                cur.append(_UNESCAPE.get(line[i], line[i]))
            elif quote_char == 39 and c == 92 and i + 1 < n and line[i + 1] == 39:
                i += 1
                cur.append(39)
            elif quote_char and c == quote_char:
                if i + 1 < n and line[i + 1] not in _BLANK:
                    return None                           # closing quote must end the word
                i += 1
                break
            elif not quote_char and (c is None or c in _ENDS_WORD):
                break
            elif not quote_char and c in (34, 39):
                quote_char = c
            else:
                cur.append(c)
            i += 1
        args.append(bytes(cur))


def quote(data: bytes) -> bytes:
    """Double-quoted form that split_args() reads back unchanged (sdscatrepr)."""
    out = bytearray(b'"')
    for c in data:
        out += _ESCAPE.get(c) or (bytes((c,)) if 32 <= c < 127 else b"\\x%02x" % c)
    return bytes(out + b'"')


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000 ** 2, "mb": 1024 ** 2,
          "g": 1000 ** 3, "gb": 1024 ** 3}
_MEMORY = re.compile(r"(-?[0-9]+)([A-Za-z]*)")
_INTEGER = re.compile(r"-?[0-9]+")
INT32_MAX, INT64_MAX = 2 ** 31 - 1, 2 ** 63 - 1


def parse_memory(text: str) -> int:
    """'1k' = 1000, '1kb' = 1024, m/mb, g/gb, case-insensitive; plain bytes otherwise."""
    m = _MEMORY.fullmatch(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise InvalidValue("must be a number of bytes, optionally with a unit (k, kb, m, mb, g, gb)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def format_memory(n: int) -> str:
    """The shortest exact form using gb/mb/kb (as CONFIG REWRITE writes sizes)."""
    for unit in ("gb", "mb", "kb"):
        if n and n % _UNITS[unit] == 0:
            return "%d%s" % (n // _UNITS[unit], unit)
    return str(n)


def to_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")
