"""The tests' RESP vocabulary: the node's one command encoder
(:func:`disque.resp.command.encode_command`) called with the arguments
themselves, and one error test."""

import hiredis

from disque.resp.command import encode_command as _encode_command


def encode_command(*args) -> bytes:
    """``args`` as a RESP array of bulk strings, by the node's encoder
    (bytes, str, int); any other value (a float) goes as its ``str``."""
    return _encode_command([a if isinstance(a, (bytes, str, int)) else str(a) for a in args])


def is_error(reply, prefix=None):
    """True if ``reply`` (as hiredis reads it) is an error, starting with
    ``prefix`` when given."""
    return isinstance(reply, hiredis.ReplyError) and (prefix is None or str(reply).startswith(prefix))
