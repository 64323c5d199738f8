"""Users on a real node, with the real redis-cli: ``--user u --pass p``
(AUTH username password), tenants kept apart, ACL SAVE to an aclfile,
and a TLS client certificate naming the user (``tls-auth-clients-user
cn``)."""

import os
import subprocess

import pytest

from tests.support.process import NodeProcess, free_port, redis_cli
from tests.support.tls import make_pki, node_directives

USERS = """\
user alice on >alice-pw ~a:* +@all
user bob on >bob-pw ~b:* +@all
user feeder on >feeder-pw ~* +@produce +@connection
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("acl")
    (workdir / "users.acl").write_text(USERS)
    conf = workdir / "disque.conf"
    conf.write_text("aclfile users.acl\n")
    n = NodeProcess(workdir, config=str(conf)).start()
    yield n
    n.stop()


def as_user(node, user, password, *args):
    code, out = redis_cli(node.port, "--user", user, "--pass", password, "--no-auth-warning", *args)
    assert code == 0, out
    return out.decode().strip()


def test_redis_cli_user_and_pass(node):
    assert as_user(node, "alice", "alice-pw", "ACL", "WHOAMI") == "alice"
    # redis-cli reports the failed AUTH on stderr and goes on as the default user
    failed = subprocess.run(["redis-cli", "-p", str(node.port), "--user", "alice", "--pass", "bob-pw",
                             "--no-auth-warning", "ACL", "WHOAMI"], capture_output=True, timeout=30)
    assert b"WRONGPASS" in failed.stderr and failed.stdout == b"default\n"
    assert redis_cli(node.port, "ACL", "WHOAMI") == (0, b"default\n")  # no requirepass: the default user


def test_tenants_cannot_see_take_ack_or_delete_each_others_jobs(node):
    a = as_user(node, "alice", "alice-pw", "ADDJOB", "a:orders", "alice-secret", "0")
    b = as_user(node, "bob", "bob-pw", "ADDJOB", "b:orders", "bob-secret", "0")
    assert a.startswith("D-") and b.startswith("D-")
    for args in (("ADDJOB", "b:orders", "x", "0"), ("QLEN", "b:orders"), ("QPEEK", "b:orders", "1"),
                 ("GETJOB", "NOHANG", "FROM", "b:orders")):
        assert as_user(node, "alice", "alice-pw", *args) == "NOPERM No permissions to access a queue", args
    for command in ("SHOW", "ACKJOB", "FASTACK", "DELJOB", "NACK", "DEQUEUE", "WORKING"):
        assert as_user(node, "alice", "alice-pw", command, b) == "NOPERM No permissions to access a job", command
    assert "bob-secret" not in as_user(node, "alice", "alice-pw", "JSCAN", "0", "COUNT", "1000", "REPLY", "all")
    assert as_user(node, "alice", "alice-pw", "QSCAN", "0", "COUNT", "1000").split() == ["0", "a:orders"]
    # bob's job is whole, and his
    assert as_user(node, "bob", "bob-pw", "QLEN", "b:orders") == "1"
    assert "bob-secret" in as_user(node, "bob", "bob-pw", "GETJOB", "NOHANG", "FROM", "b:orders")
    assert as_user(node, "bob", "bob-pw", "ACKJOB", b) == "1"
    assert "alice-secret" in as_user(node, "alice", "alice-pw", "GETJOB", "NOHANG", "FROM", "a:orders")


def test_categories_and_the_acl_log(node):
    assert as_user(node, "feeder", "feeder-pw", "ADDJOB", "c:x", "body", "0").startswith("D-")
    assert as_user(node, "feeder", "feeder-pw", "GETJOB", "NOHANG", "FROM", "c:x") == \
        "NOPERM User feeder has no permissions to run the 'getjob' command"
    assert as_user(node, "feeder", "feeder-pw", "DEBUG", "FLUSHALL").startswith("NOPERM")
    log = redis_cli(node.port, "ACL", "LOG", "10")[1].decode()
    assert "feeder" in log and "getjob" in log


def test_acl_setuser_then_save_writes_the_aclfile(node):
    assert redis_cli(node.port, "ACL", "SETUSER", "carol", "on", ">carol-pw", "~c:*", "+@consume",
                     "+@connection") == (0, b"OK\n")
    assert redis_cli(node.port, "ACL", "SAVE") == (0, b"OK\n")
    path = os.path.join(node.workdir, "users.acl")
    text = open(path).read()
    assert "user carol on #" in text and "carol-pw" not in text and (os.stat(path).st_mode & 0o777) == 0o600
    assert as_user(node, "carol", "carol-pw", "QLEN", "c:x") .startswith("NOPERM")  # @inspect not given
    assert as_user(node, "carol", "carol-pw", "GETJOB", "NOHANG", "FROM", "c:x") != ""


def test_a_tls_client_certificate_names_the_user(tmp_path):
    pki = make_pki(tmp_path / "pki")
    tls_port = free_port()
    directives = node_directives(pki, **{"tls-port": tls_port, "tls-auth-clients-user": "cn",
                                         "requirepass": "default-pw", "user": "tenant-a on >t-pw ~a:* +@all"})
    args = [arg for name, value in directives.items() for arg in ("--set", "%s=%s" % (name, value))]
    n = NodeProcess(tmp_path / "n", args=args).start()
    try:
        def cli(cert, *command):
            return redis_cli(tls_port, "--tls", "--cacert", pki.ca, "--cert", getattr(pki, cert),
                             "--key", getattr(pki, cert + "_key"), *command)[1].decode().strip()

        assert cli("tenant", "ACL", "WHOAMI") == "tenant-a"  # no AUTH: the certificate says who
        assert cli("tenant", "QLEN", "b:q") == "NOPERM No permissions to access a queue"
        assert cli("client", "ACL", "WHOAMI").startswith("NOAUTH")  # CN "disque client": no such user
    finally:
        n.stop()
