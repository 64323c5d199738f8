"""Users on a node in memory: AUTH, ACL, tenants kept apart over RESP."""

import os

import pytest

from disque.config import Config, ConfigError
from disque.node.service import DisqueNodeService
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from tests.support.memory import NOAUTH, T0, Node, memory_config

OK = b"+OK\r\n"
TENANTS = ("alice on >apw ~a:* +@all", "bob on >bpw ~b:* +@all")


class UsersNode(Node):
    """A started node in memory with ``users`` (``user`` lines) and
    ``directives``."""

    def __init__(self, workdir, users, **directives):
        os.makedirs(str(workdir), exist_ok=True)
        self.dir = str(workdir)
        self.config = memory_config({"dir": self.dir, **directives})
        for line in users:
            self.config.apply_overrides({"user": line})
        self.reactor = MemoryReactorClock()
        self.reactor.advance(T0)
        self.service = DisqueNodeService(self.config, reactor=self.reactor, on_shutdown=lambda: None)
        self.service.startService()


    def connect(self, transport=None):
        """A client on loopback (protected mode lets it in)."""
        return super().connect(transport or StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000)))


@pytest.fixture
def two(tmp_path):
    """A started node with users alice (~a:*) and bob (~b:*)."""
    node = UsersNode(tmp_path, TENANTS)
    yield node
    node.service.stopService()


def login(node, name, password):
    c = node.connect()
    assert c.call("AUTH", name, password) == OK
    return c


def job_id(reply: bytes) -> str:
    assert reply.startswith(b"+D-"), reply
    return reply[1:-2].decode()


def test_auth_with_a_user_name_and_whoami(two):
    c = two.connect()
    assert c.call("ACL", "WHOAMI") == b"$7\r\ndefault\r\n"  # no requirepass: default, nopass
    assert c.call("AUTH", "alice", "nope") == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert c.call("AUTH", "nobody", "apw").startswith(b"-WRONGPASS")
    assert c.call("AUTH", "alice", "apw") == OK
    assert c.call("ACL", "WHOAMI") == b"$5\r\nalice\r\n"
    assert c.call("AUTH", "apw") == b"-ERR Client sent AUTH, but no password is set\r\n"  # the original's
    assert c.call("AUTH", "a", "b", "c") == b"-ERR syntax error\r\n"
    assert b"$4\r\nauth\r\n:2\r\n" in c.call("COMMAND", "INFO", "auth")  # the original's arity, shown


def test_requirepass_is_the_default_user_and_users_need_their_own_password(tmp_path):
    node = UsersNode(tmp_path, ["alice on >apw ~* +@all"], requirepass="s3cret")
    c = node.connect()
    assert c.call("PING") == NOAUTH
    assert c.call("AUTH", "wrong") == b"-ERR invalid password\r\n"  # the original's
    assert c.call("AUTH", "default", "s3cret") == OK and c.call("PING") == b"+PONG\r\n"
    d = node.connect()
    assert d.call("AUTH", "alice", "apw") == OK and d.call("ACL", "WHOAMI") == b"$5\r\nalice\r\n"


def test_tenants_cannot_see_take_ack_or_delete_each_others_jobs(two):
    alice, bob = login(two, "alice", "apw"), login(two, "bob", "bpw")
    a = job_id(alice.call("ADDJOB", "a:q", "alice-body", "0"))
    b = job_id(bob.call("ADDJOB", "b:q", "bob-body", "0"))
    perm_q = b"-NOPERM No permissions to access a queue\r\n"
    perm_j = b"-NOPERM No permissions to access a job\r\n"
    assert alice.call("ADDJOB", "b:q", "x", "0") == perm_q
    assert alice.call("GETJOB", "NOHANG", "FROM", "b:q") == perm_q
    assert alice.call("QLEN", "b:q") == perm_q and alice.call("QPEEK", "b:q", "1") == perm_q
    assert alice.call("QSTAT", "b:q") == perm_q and alice.call("PAUSE", "b:q", "all") == perm_q
    for command in (("SHOW", b), ("ACKJOB", b), ("FASTACK", b), ("DELJOB", b), ("NACK", b),
                    ("WORKING", b), ("ENQUEUE", b), ("DEQUEUE", b), ("ACKJOB", a, b)):
        assert alice.call(*command) == perm_j, command
    assert alice.call("JSCAN", "0", "QUEUE", "b:q") == perm_q
    assert b"bob-body" not in alice.call("JSCAN", "0", "COUNT", "1000", "REPLY", "all")
    assert a.encode() in alice.call("JSCAN", "0", "COUNT", "1000")
    assert alice.call("QSCAN", "0", "COUNT", "1000") == b"*2\r\n$1\r\n0\r\n*1\r\n$3\r\na:q\r\n"
    # bob's job is untouched, and bob still has it all
    assert bob.call("QLEN", "b:q") == b":1\r\n"
    assert b"bob-body" in bob.call("GETJOB", "NOHANG", "FROM", "b:q")
    assert bob.call("ACKJOB", b) == b":1\r\n"
    assert alice.call("GETJOB", "NOHANG", "FROM", "a:q").count(b"alice-body") == 1


def test_categories_limit_what_a_user_runs(tmp_path):
    node = UsersNode(tmp_path, ["producer on >p ~jobs:* +@produce +@connection"])
    c = login(node, "producer", "p")
    assert c.call("ADDJOB", "jobs:1", "x", "0").startswith(b"+D-")
    assert c.call("PING") == b"+PONG\r\n"
    assert c.call("GETJOB", "FROM", "jobs:1") == \
        b"-NOPERM User producer has no permissions to run the 'getjob' command\r\n"
    assert c.call("CONFIG", "GET", "maxmemory").startswith(b"-NOPERM")
    assert c.call("DEBUG", "FLUSHALL").startswith(b"-NOPERM")
    assert c.call("CLIENT", "KILL", "1.1.1.1:1") == \
        b"-NOPERM User producer has no permissions to run the 'client|kill' command\r\n"
    assert c.call("CLIENT", "SETNAME", "me") == OK


def test_acl_setuser_changes_connected_clients_and_deluser_closes_them(two):
    admin = two.connect()  # default: every command, every queue
    alice = login(two, "alice", "apw")
    assert alice.call("QLEN", "c:q") .startswith(b"-NOPERM")
    assert admin.call("ACL", "SETUSER", "alice", "~c:*") == OK
    assert alice.call("QLEN", "c:q") == b":0\r\n"
    assert admin.call("ACL", "SETUSER", "alice", "bogus") == \
        b"-ERR Error in ACL SETUSER modifier 'bogus': Syntax error\r\n"
    assert admin.call("ACL", "DELUSER", "alice", "nobody") == b":1\r\n"
    assert alice.closed and not admin.closed
    assert admin.call("ACL", "DELUSER", "default") == b"-ERR The 'default' user cannot be removed\r\n"
    assert admin.call("ACL", "USERS") == b"*2\r\n$3\r\nbob\r\n$7\r\ndefault\r\n"


def test_acl_getuser_list_cat(two):
    admin = two.connect()
    got = admin.call("ACL", "GETUSER", "alice")
    assert b"$6\r\nqueues\r\n$4\r\n~a:*\r\n" in got and b"+@all" in got and b"apw" not in got
    assert admin.call("ACL", "GETUSER", "nobody") == b"$-1\r\n"
    listing = admin.call("ACL", "LIST")
    assert b"user alice on #" in listing and b"user default on nopass ~* +@all" in listing
    assert b"$7\r\nproduce\r\n" in admin.call("ACL", "CAT")
    assert admin.call("ACL", "CAT", "produce") == b"*1\r\n$6\r\naddjob\r\n"
    assert admin.call("ACL", "CAT", "nope") == b"-ERR Unknown category 'nope'\r\n"
    assert admin.call("ACL", "NOPE").startswith(b"-ERR Unknown subcommand")
    assert len(admin.call("ACL", "GENPASS")) == len(b"$64\r\n\r\n") + 64


def test_acl_log_keeps_denials_and_failed_auths(two):
    admin = two.connect()
    alice = login(two, "alice", "apw")
    for _ in range(3):
        alice.call("QLEN", "b:q")
    two.connect().call("AUTH", "bob", "wrong")
    log = admin.call("ACL", "LOG")
    assert log.startswith(b"*2\r\n")
    assert b"$6\r\nreason\r\n$4\r\nauth\r\n" in log and b"$8\r\nusername\r\n$3\r\nbob\r\n" in log
    assert b"$5\r\ncount\r\n:3\r\n$6\r\nreason\r\n$5\r\nqueue\r\n" in log
    assert admin.call("ACL", "LOG", "RESET") == OK and admin.call("ACL", "LOG") == b"*0\r\n"


def test_acl_save_and_load_use_the_aclfile(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user alice on >apw ~a:* +@all\n")
    node = UsersNode(tmp_path, [], aclfile=str(path))
    admin = node.connect()
    assert login(node, "alice", "apw")
    assert admin.call("ACL", "SETUSER", "carol", "on", ">cpw", "~c:*", "+@consume") == OK
    assert admin.call("ACL", "SAVE") == OK
    text = path.read_text()
    assert "user carol on #" in text and "cpw" not in text and (os.stat(path).st_mode & 0o777) == 0o600
    path.write_text("user dave on >dpw ~* +@all\n")
    assert admin.call("ACL", "LOAD") == OK
    assert admin.call("ACL", "USERS") == b"*2\r\n$4\r\ndave\r\n$7\r\ndefault\r\n"
    path.write_text("user eve on bogus\n")
    assert admin.call("ACL", "LOAD").startswith(b"-ERR Error loading ACLs, nothing changed")
    assert admin.call("ACL", "USERS") == b"*2\r\n$4\r\ndave\r\n$7\r\ndefault\r\n"
    assert UsersNode(tmp_path / "other", []).connect().call("ACL", "SAVE").startswith(
        b"-ERR This Disque instance is not configured")


def test_users_in_the_config_and_an_aclfile_are_refused_together(tmp_path):
    (tmp_path / "users.acl").write_text("user b on\n")
    with pytest.raises(ConfigError, match="use one of them"):
        UsersNode(tmp_path, ["a on"], aclfile="users.acl")
    with pytest.raises(ConfigError, match="can't read the aclfile"):
        UsersNode(tmp_path, [], aclfile="missing.acl")
    with pytest.raises(ConfigError, match="Error in user declaration 'bogus'"):
        Config.defaults().apply_overrides({"user": "a on bogus"})


def test_config_rewrite_keeps_users_made_with_acl_setuser(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text("dir %s\n" % tmp_path)
    node = UsersNode(tmp_path, [])
    node.config.path = str(path)
    c = node.connect()
    assert c.call("ACL", "SETUSER", "alice", "on", ">apw", "~a:*", "+@produce") == OK
    assert c.call("CONFIG", "REWRITE") == OK
    node.service.stopService()
    text = path.read_text()
    assert "user alice on #" in text and "apw" not in text and "user default" not in text
    again = DisqueNodeService(Config.from_file(str(path)), reactor=MemoryReactorClock(), on_shutdown=lambda: None)
    user = again.runtime.ctx.acl.users[b"alice"]
    assert user.check_password(b"apw") and user.queues == [b"a:*"] and user.command_rules == [b"-@all", b"+@produce"]


def test_acl_changes_are_audited_without_their_passwords(two):
    from tests.support.memory import captured_log, texts

    admin = two.connect()
    with captured_log() as events:
        assert admin.call("ACL", "SETUSER", "carol", "on", ">carol-secret", "~c:*") == OK
        assert admin.call("ACL", "DELUSER", "carol") == b":1\r\n"
    lines = [t for t in texts(events) if "ACL" in t]
    assert len(lines) == 2 and all(t.startswith("default from 127.0.0.1:") for t in lines), lines
    assert '"SETUSER" "carol" "(redacted)"' in lines[0] and "carol-secret" not in "".join(lines)
