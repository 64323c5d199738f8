"""The cluster-password handshake (disque.bus.auth) and the failed
authentication log (disque.access.failed_auth), pure: no sockets, a fake clock."""

import pytest
from hypothesis import given, strategies as st

from disque.bus import auth, wire
from disque.access.failed_auth import MAX_SOURCES, WINDOW, FailedAuth


def run(a, b):
    """Both ends say hello and answer each other until neither has more to
    say; returns the frames each sent, in order."""
    sent = {a: [a.hello()], b: [b.hello()]}
    inbox = {a: [sent[b][0]], b: [sent[a][0]]}
    while inbox[a] or inbox[b]:
        for me, peer in ((a, b), (b, a)):
            while inbox[me]:
                answer = me.receive(inbox[me].pop(0))
                if answer is not None:
                    sent[me].append(answer)
                    inbox[peer].append(answer)
    return sent


def pair(pw_initiator=b"secret", pw_acceptor=b"secret"):
    return auth.Handshake(pw_initiator, True, auth.Nonces()), auth.Handshake(pw_acceptor, False, auth.Nonces())


def test_same_password_authenticates_both_ends_without_the_password_on_the_wire():
    a, b = pair()
    sent = run(a, b)
    assert a.done and b.done
    assert all(b"secret" not in frame for frames in sent.values() for frame in frames)
    assert all(len(frame) <= auth.MAX_FRAME for frames in sent.values() for frame in frames)


def test_a_wrong_password_fails_on_both_ends():
    a, b = pair(b"secret", b"guess")
    with pytest.raises(auth.AuthFailed, match="wrong cluster-password"):
        run(a, b)
    assert not a.done and not b.done


def test_a_message_frame_before_the_handshake_fails_it():
    # A node without cluster-password starts with a PING: no frame gets in.
    a = auth.Handshake(b"secret", False, auth.Nonces())
    a.hello()
    ping = wire.MAGIC + b"\x02\x00" + b"x" * 60
    with pytest.raises(auth.AuthFailed, match="before authenticating"):
        a.receive(ping)


def test_a_proof_before_the_challenge_or_twice_is_refused():
    a, b = pair()
    b.hello()
    with pytest.raises(auth.AuthFailed, match="malformed"):
        a.receive(auth.MAGIC + bytes((auth.PROOF,)) + b"\0" * auth.MAC_LEN)
    a2, b2 = pair()
    run(a2, b2)
    with pytest.raises(auth.AuthFailed):
        b2.receive(a2.hello())  # a second challenge on a connection


def test_a_proof_from_another_connection_does_not_verify():
    """An eavesdropper who saw a whole handshake replays the initiator's
    frames on a new connection: the acceptor's fresh nonce defeats it."""
    a, b = pair()
    seen = run(a, b)[a]
    victim = auth.Handshake(b"secret", False, auth.Nonces())
    victim.hello()
    victim.receive(seen[0])
    with pytest.raises(auth.AuthFailed, match="wrong cluster-password"):
        victim.receive(seen[1])


def test_a_proof_made_in_the_other_role_does_not_verify():
    """With nonces chosen so both ends see the same pair, an acceptor's
    proof is still not an initiator's."""
    nonces = auth.Nonces()
    acceptor = auth.Handshake(b"secret", False, nonces)
    attacker_nonce = b"n" * auth.NONCE_LEN
    proof_by_acceptor = acceptor.receive(auth.MAGIC + bytes((auth.CHALLENGE,)) + attacker_nonce)
    with pytest.raises(auth.AuthFailed, match="wrong cluster-password"):
        acceptor.receive(proof_by_acceptor)  # reflected back as the initiator's proof


def test_a_reflected_nonce_is_refused():
    """The attack the Nonces registry stops: the attacker makes the node
    open a link to it (A as initiator, nonce nA) while it also holds a
    connection to the node's bus port (A as acceptor, nonce nB).  Sending
    nB as its challenge on the link would get A to sign (nA, nB) as the
    initiator, exactly the proof A expects on the other connection if the
    attacker claims nA there.  A refuses its own nonce as a peer's."""
    nonces = auth.Nonces()  # one node: both handshakes share its registry
    inbound = auth.Handshake(b"secret", False, nonces)
    outbound = auth.Handshake(b"secret", True, nonces)
    with pytest.raises(auth.AuthFailed, match="reflected"):
        outbound.receive(inbound.hello())
    with pytest.raises(auth.AuthFailed, match="reflected"):
        inbound.receive(outbound.hello())


def test_released_nonces_leave_the_registry():
    nonces = auth.Nonces()
    a = auth.Handshake(b"s", True, nonces)
    assert a.nonce in nonces
    a.release()
    assert a.nonce not in nonces


@given(st.integers(min_value=0, max_value=auth.MAC_LEN * 8 - 1))
def test_any_flipped_bit_of_a_proof_fails(bit):
    a, b = pair()
    hello_a, hello_b = a.hello(), b.hello()
    a.receive(hello_b)
    proof = bytearray(b.receive(hello_a))
    proof[3 + bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(auth.AuthFailed):
        a.receive(bytes(proof))


@given(st.binary(max_size=80))
def test_any_frame_either_advances_or_fails_cleanly(frame):
    a = auth.Handshake(b"secret", True, auth.Nonces())
    a.hello()
    try:
        answer = a.receive(frame)
    except auth.AuthFailed:
        return
    assert answer is not None and answer[:3] == auth.MAGIC + bytes((auth.PROOF,))
    assert not a.done


# -- the failed authentication log ---------------------------------------------

class FakeLog:
    def __init__(self):
        self.lines = []

    def warn(self, fmt, **kw):
        self.lines.append(fmt.format(**kw))


def test_failures_are_logged_once_per_source_and_minute_with_the_count_of_the_rest():
    now = [1000.0]
    log = FakeLog()
    failed = FailedAuth(lambda: now[0], log)
    for _ in range(100):  # one a second: logged at 0 s and at 60 s
        failed.record("client", "10.0.0.1", "invalid password")
        now[0] += 1
    failed.record("client", "10.0.0.2", "invalid password")   # another source: its own line
    failed.record("bus", "10.0.0.1", "wrong cluster-password")  # another kind: its own line
    assert len(log.lines) == 4
    assert log.lines[0] == "Failed client authentication from 10.0.0.1: invalid password"
    assert log.lines[1] == ("Failed client authentication from 10.0.0.1: invalid password "
                            "(59 more failures not logged in the last minute)")
    assert "10.0.0.2" in log.lines[2] and log.lines[3].startswith("Failed bus authentication")


@pytest.mark.parametrize("step", [0.0, WINDOW / 100])
def test_the_source_table_stays_bounded(step):
    now = [0.0]
    log = FakeLog()
    failed = FailedAuth(lambda: now[0], log)
    for n in range(3 * MAX_SOURCES):
        failed.record("client", "source-%d" % n, "x")
        now[0] += step
    assert len(failed) == (MAX_SOURCES if step == 0 else 100)
    assert len(log.lines) == 3 * MAX_SOURCES  # every new source was logged
