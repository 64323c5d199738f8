"""Argument parsing with the original's rules (Redis ``string2ll`` etc.)."""

from ..core import jobid
from ..core.errors import CommandError

LLONG_MAX = (1 << 63) - 1
LLONG_MIN = -(1 << 63)
ULONG_MAX = (1 << 64) - 1


def parse_ll(value: bytes):
    """Strict signed 64-bit integer as Redis' string2ll, or None.

    No spaces, no '+', no leading zeros (except "0" itself).
    """
    if not value or len(value) > 20:
        return None
    digits = value[1:] if value[0] == 45 else value  # '-'
    if not digits.isdigit() or (digits[0] == 48 and len(digits) > 1):
        return None
    if value == b"-0":
        return None
    n = int(value)
    if n > LLONG_MAX or n < LLONG_MIN:
        return None
    return n


def parse_timeout(value: bytes) -> int:
    """Milliseconds timeout for ADDJOB / GETJOB; raises CommandError."""
    if value == b"0":
        return 0
    n = parse_ll(value)
    if n is None:
        raise CommandError(b"ERR", b"timeout is not an integer or out of range")
    if n < 0:
        raise CommandError(b"ERR", b"timeout is negative")
    return n


def parse_int_or_error(value: bytes) -> int:
    n = parse_ll(value)
    if n is None:
        raise CommandError(b"ERR", b"value is not an integer or out of range")
    return n


def parse_cursor(value: bytes):
    """SCAN cursor as C strtoul: unsigned 64 bit, negative values wrap.
    Returns None when not a cursor."""
    v = value.strip()
    sign = 1
    if v[:1] in (b"+", b"-"):
        sign = -1 if v[:1] == b"-" else 1
        v = v[1:]
    if not v.isdigit():
        return None
    n = int(v)
    if n > ULONG_MAX:
        return None
    return n if sign > 0 else (-n) & ULONG_MAX


BADID = CommandError(b"BADID", b"Invalid Job ID format.")


def validate_ids(ids) -> None:
    """Mass-validate job IDs first, so an error means nothing was done."""
    valid = jobid.is_valid
    for job_id in ids:
        if not valid(job_id):
            raise BADID


def subcommand(argv, arities: dict):
    """``(name, fits)`` for a command with subcommands, declared in
    ``arities`` as ``{lower-case name: arity}``: ``name`` is ``argv[1]``
    in lower case if ``arities`` has it (None otherwise), ``fits`` whether
    ``len(argv)``, the command and its subcommand included, matches that
    arity: ``n`` exactly n, ``-n`` at least n (the command table's
    convention), or a tuple of the counts allowed.  False for a name not
    declared.  The command answers with its own error (each has the
    original's text)."""
    name = argv[1].lower()
    arity = arities.get(name)
    if arity is None:
        return None, False
    argc = len(argv)
    if type(arity) is tuple:
        return name, argc in arity
    return name, (argc == arity if arity >= 0 else argc >= -arity)
