"""cluster-password on real processes: three nodes with the password form a
cluster and replicate; a node with another password, and a stranger on the
bus port speaking the bus protocol, get nothing in, are counted in INFO and
logged once."""

import socket
import struct

import pytest

from disque.bus import auth, wire
from disque.core import messages
from tests.support.process import NodeProcess, call, info, mesh_fixture, wait_for

PASSWORD = ("--set", "cluster-password=correct horse battery staple")


trio = mesh_fixture(3, scope="module", args=PASSWORD)


def stats(node):
    c = node.client()
    try:
        return info(c, "stats")
    finally:
        c.close()


def test_nodes_with_the_password_replicate(trio):
    job_id = call(trio[0], "ADDJOB", "q", "body", 5000, "REPLICATE", 3)
    assert job_id.startswith(b"D-")
    assert all(call(n, "SHOW", job_id) is not None for n in trio)
    assert all(stats(n)["bus_auth_failures"] == "0" for n in trio)


def test_a_node_with_another_password_stays_out(trio, tmp_path):
    intruder = NodeProcess(tmp_path / "intruder", args=("--set", "cluster-password=guess")).start()
    try:
        c = intruder.client()
        assert c.call("CLUSTER", "MEET", "127.0.0.1", str(trio[0].port)) == b"OK"
        c.close()
        wait_for(lambda: int(stats(trio[0])["bus_auth_failures"]) >= 1, what="a failed handshake on the node")
        wait_for(lambda: int(stats(intruder)["bus_auth_failures"]) >= 1, what="a failed handshake on the intruder")
        lines = call(intruder, "CLUSTER", "NODES").splitlines()  # it learned no one: only its MEET, in handshake
        assert all(b" myself " in line or b" handshake " in line for line in lines)
        trio_ids = [call(n, "CLUSTER", "MYID") for n in trio]
        assert not any(node_id in line for line in lines for node_id in trio_ids)
        intruder_id = call(intruder, "CLUSTER", "MYID")
        assert all(intruder_id not in call(n, "CLUSTER", "NODES") for n in trio)
        # its MEET handshake retries: still one warning per source and minute
        failures = "Failed bus authentication from 127.0.0.1"
        assert trio[0].log().count(failures) == 1
    finally:
        intruder.kill()


def test_a_stranger_speaking_the_bus_protocol_is_dropped(trio):
    before = int(stats(trio[1])["bus_auth_failures"])
    with socket.create_connection(("127.0.0.1", trio[1].port + 10000), timeout=5) as s:
        challenge = b""
        while len(challenge) < 4 + 3 + auth.NONCE_LEN:
            challenge += s.recv(64)
        assert challenge[4:6] == auth.MAGIC and len(challenge) == 4 + 3 + auth.NONCE_LEN
        frame = wire.encode(messages.Header(b"f" * 40, b"127.0.0.1", 7999, 0), messages.Meet(gossip=()))
        s.sendall(struct.pack(">I", len(frame)) + frame)
        assert s.recv(4096) == b""  # closed, and nothing more said
    assert int(stats(trio[1])["bus_auth_failures"]) == before + 1
    assert b"f" * 40 not in call(trio[1], "CLUSTER", "NODES")
