"""The ``cluster-password`` handshake: bus peers prove they know the secret.

With ``cluster-password`` set, a bus connection carries no message until
both ends have proved, on that connection, that they know the password.
The password never crosses the wire; each proof is an HMAC-SHA256 keyed
with it over both ends' fresh random nonces and the prover's role.  Frames
use the bus framing (4-byte length) and their own magic, ``DA``, which no
message frame (``DQ``, :mod:`disque.bus.wire`) starts with::

    challenge = "DA" 0x01 nonce:16      sent by both ends as soon as connected
    proof     = "DA" 0x02 mac:32        sent by each end once it has the peer's nonce

    mac = HMAC-SHA256(password, "disque-bus-auth/1 " role initiator-nonce acceptor-nonce)

``role`` is ``initiator`` for the end that opened the connection (our link
to a peer) and ``acceptor`` for the end that accepted it (our bus port).

Invariants:

* :attr:`Handshake.done` becomes true only after the peer sent the proof
  for this connection's two nonces in the peer's own role: a proof seen on
  another connection, or produced by the other role, does not verify.
* Reflection: a proof made by *this node* could only be replayed to it if a
  nonce it drew came back to it as a peer's nonce.  :class:`Nonces` keeps
  the nonces of the node's handshakes in progress and a peer nonce found
  there fails the handshake, so the node never verifies a proof it made.
* Before ``done`` a connection hands nothing to the node: a message frame
  fails the handshake, and frames longer than :data:`MAX_FRAME` are refused
  by the bus protocol's length limit.

What it does not do: the handshake authenticates the start of a TCP
connection, not every byte after it.  Against an attacker who can inject
into or take over connections on the network, use TLS on the bus.
"""

import hashlib
import hmac
import os

MAGIC = b"DA"
CHALLENGE = 1
PROOF = 2
NONCE_LEN = 16
MAC_LEN = 32
#: The longest frame a connection may send before it is authenticated.
MAX_FRAME = 64
#: Seconds a connection has to complete the handshake.
TIMEOUT = 5.0

_CONTEXT = b"disque-bus-auth/1 "
_ROLES = (b"acceptor", b"initiator")


class AuthFailed(Exception):
    """The peer did not prove it knows the password; ``str()`` says how."""


def mac(password: bytes, role: bytes, initiator_nonce: bytes, acceptor_nonce: bytes) -> bytes:
    """The proof ``role``'s end sends for a connection with these nonces."""
    return hmac.new(password, _CONTEXT + role + initiator_nonce + acceptor_nonce, hashlib.sha256).digest()


def is_handshake_frame(frame: bytes) -> bool:
    return frame[:2] == MAGIC


class Nonces:
    """The nonces of one node's handshakes in progress (see the module's
    reflection invariant)."""

    def __init__(self):
        self._live = set()

    def draw(self) -> bytes:
        nonce = os.urandom(NONCE_LEN)
        self._live.add(nonce)
        return nonce

    def release(self, nonce: bytes) -> None:
        self._live.discard(nonce)

    def __contains__(self, nonce) -> bool:
        return nonce in self._live


class Handshake:
    """One end of the handshake on one connection, sans I/O.

    Send :meth:`hello` when connected, hand every frame from the peer to
    :meth:`receive` (which returns a frame to send, or None, or raises
    :class:`AuthFailed`) until :attr:`done`; call :meth:`release` when the
    handshake ends either way."""

    def __init__(self, password: bytes, initiator: bool, nonces: Nonces):
        self._password = password
        self._initiator = initiator
        self._nonces = nonces
        self.nonce = nonces.draw()
        self.peer_nonce = None
        self.done = False

    def hello(self) -> bytes:
        return MAGIC + bytes((CHALLENGE,)) + self.nonce

    def receive(self, frame: bytes) -> "bytes | None":
        if not is_handshake_frame(frame):
            raise AuthFailed("sent a message before authenticating (is cluster-password set on it?)")
        kind, body = frame[2:3], frame[3:]
        if kind == bytes((CHALLENGE,)) and self.peer_nonce is None and len(body) == NONCE_LEN:
            if body in self._nonces:
                raise AuthFailed("sent back a nonce of this node (a reflected handshake)")
            self.peer_nonce = body
            return MAGIC + bytes((PROOF,)) + self._mac(self._initiator)
        if kind == bytes((PROOF,)) and self.peer_nonce is not None and len(body) == MAC_LEN:
            if not hmac.compare_digest(body, self._mac(not self._initiator)):
                raise AuthFailed("wrong cluster-password")
            self.done = True
            return None
        raise AuthFailed("malformed handshake")

    def release(self) -> None:
        self._nonces.release(self.nonce)

    def _mac(self, by_initiator: bool) -> bytes:
        ours, theirs = self.nonce, self.peer_nonce
        initiator_nonce, acceptor_nonce = (ours, theirs) if self._initiator else (theirs, ours)
        return mac(self._password, _ROLES[by_initiator], initiator_nonce, acceptor_nonce)
