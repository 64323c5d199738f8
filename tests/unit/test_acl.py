"""Users and their rules (disque/access/acl.py), without a node."""

import pytest
from hypothesis import given, strategies as st

from disque.access import acl as acl_mod
from disque.access.acl_file import parse_lines
from disque.access.acl import CATEGORIES, Acl, AclError, User, hash_password
from disque.commands import TABLE, load
from disque.config import split_args

load()


def user(*rules) -> User:
    u = User(b"u")
    for rule in rules:
        u.apply(rule)
    return u


class Job:
    def __init__(self, queue, dead_from=b""):
        self.queue = queue
        self.opts = None if not dead_from else type("Opts", (), {"dead_from": dead_from})()


def test_every_command_of_the_table_is_in_a_category():
    named = {name.partition(b"|")[0] for names in CATEGORIES.values() for name in names}
    assert set(TABLE) <= named
    flat = [name for names in CATEGORIES.values() for name in names]
    assert len(flat) == len(set(flat)), "a command in two categories"


def test_a_new_user_may_do_nothing_until_its_rules_say():
    u = User(b"u")
    assert not u.enabled and not u.check_password(b"")
    assert u.denial(b"ping", [b"PING"], {})[0] == b"command"
    u.apply(b"on")
    u.apply(b">pw")
    assert u.check_password(b"pw") and not u.check_password(b"pW")


def test_passwords_are_kept_hashed_and_hashes_are_accepted():
    u = user(b"on", b">secret")
    assert u.passwords == [hash_password(b"secret")] and b"secret" not in u.describe()
    v = user(b"on", b"#" + hash_password(b"other"))
    assert v.check_password(b"other")
    v.apply(b"!" + hash_password(b"other"))
    assert not v.check_password(b"other")
    with pytest.raises(AclError):
        user(b"#abc")
    with pytest.raises(AclError):
        user(b"on", b"<never-set")


def test_nopass_and_off():
    u = user(b"on", b"nopass")
    assert u.check_password(b"anything")
    u.apply(b"off")
    assert not u.check_password(b"anything")
    u.apply(b"on")
    u.apply(b">pw")  # a password ends nopass, as in Redis
    assert not u.nopass and not u.check_password(b"anything")


def test_categories_and_commands():
    u = user(b"on", b"~*", b"+@produce", b"+@connection")
    assert u.denial(b"addjob", [b"ADDJOB", b"q", b"x", b"0"], {}) is None
    assert u.denial(b"ping", [b"PING"], {}) is None
    reason, obj, reply = u.denial(b"getjob", [b"GETJOB", b"FROM", b"q"], {})
    assert (reason, obj) == (b"command", b"getjob")
    assert reply == b"-NOPERM User u has no permissions to run the 'getjob' command\r\n"
    u.apply(b"+@all")
    u.apply(b"-debug")
    assert u.denial(b"debug", [b"DEBUG", b"SLEEP", b"0"], {})[0] == b"command"
    assert u.denial(b"config", [b"CONFIG", b"GET", b"x"], {}) is None
    with pytest.raises(AclError):
        u.apply(b"+@nosuchcategory")
    with pytest.raises(AclError):
        u.apply(b"+nosuchcommand")


def test_client_subcommands_split_between_connection_and_admin():
    u = user(b"on", b"~*", b"+@connection")
    assert u.denial(b"client", [b"CLIENT", b"SETNAME", b"x"], {}) is None
    assert u.denial(b"client", [b"CLIENT", b"KILL", b"1.2.3.4:5"], {})[1] == b"client|kill"
    u.apply(b"+client")
    assert u.denial(b"client", [b"CLIENT", b"LIST"], {}) is None


def test_queue_patterns_apply_to_named_queues_and_to_the_queues_of_named_jobs():
    u = user(b"on", b"+@all", b"~a:*")
    assert u.denial(b"addjob", [b"ADDJOB", b"a:1", b"x", b"0"], {}) is None
    assert u.denial(b"addjob", [b"ADDJOB", b"b:1", b"x", b"0"], {})[:2] == (b"queue", b"b:1")
    getjob = [b"GETJOB", b"TIMEOUT", b"10", b"COUNT", b"2", b"FROM", b"a:1", b"b:1"]
    assert u.denial(b"getjob", getjob, {})[:2] == (b"queue", b"b:1")
    assert u.denial(b"getjob", [b"GETJOB", b"TIMEOUT", b"from", b"FROM", b"a:x"], {}) is None
    jobs = {b"J1": Job(b"a:1"), b"J2": Job(b"b:1"), b"J3": Job(b"a:dead", dead_from=b"b:1")}
    assert u.denial(b"ackjob", [b"ACKJOB", b"J1"], jobs) is None
    assert u.denial(b"ackjob", [b"ACKJOB", b"J1", b"J2"], jobs) == (b"job", b"J2", acl_mod.NOPERM_JOB)
    assert u.denial(b"show", [b"SHOW", b"J9"], jobs)[:2] == (b"job", b"J9")  # unknown here: whose is it?
    assert u.denial(b"revive", [b"REVIVE", b"J3"], jobs)[:2] == (b"job", b"J3")  # back into b:1: no
    assert u.denial(b"jscan", [b"JSCAN", b"0", b"QUEUE", b"b:1"], jobs)[:2] == (b"queue", b"b:1")
    u.apply(b"allqueues")
    assert u.denial(b"ackjob", [b"ACKJOB", b"J2", b"J9"], jobs) is None


def test_unrestricted_is_exactly_every_command_on_every_queue():
    assert user(b"on", b"~*", b"+@all").unrestricted
    assert not user(b"on", b"~*", b"+@all", b"-debug").unrestricted
    assert not user(b"on", b"~a:*", b"+@all").unrestricted
    assert user(b"on", b"~*", b"+@all", b"-debug", b"+debug").unrestricted


def test_redis_channel_and_selector_rules_are_refused_not_ignored():
    for rule in (b"&chan", b"%R~a", b"(~x +@all)", b"allchannels"):
        with pytest.raises(AclError):
            user(rule)


RULES = st.lists(st.sampled_from([
    b"on", b"off", b"nopass", b"resetpass", b">p1", b">p2", b"~a:*", b"~b:*", b"~*", b"allqueues", b"resetqueues",
    b"+@all", b"-@all", b"+@produce", b"-@consume", b"+@admin", b"-debug", b"+client|list", b"-client",
    b"+ackjob", b"reset", b"allcommands", b"nocommands", b'~with space']), max_size=12)


@given(RULES)
def test_describe_rebuilds_the_same_user(rules):
    """ACL LIST's line of a user (what ACL SAVE writes) parses back into
    a user with the same permissions."""
    u = user(*rules)
    line = u.describe()
    again = parse_lines([(1, split_args(line))])[b"u"]
    for slot in ("enabled", "nopass", "passwords", "commands", "all_queues", "queues", "unrestricted"):
        assert getattr(again, slot) == getattr(u, slot), slot
    assert again.describe() == line


def test_setuser_is_all_or_nothing_and_changes_the_user_in_place():
    a = Acl()
    u = a.setuser(b"alice", [b"on", b">pw", b"~a:*", b"+@all"])
    with pytest.raises(AclError, match="Error in ACL SETUSER modifier 'bogus'"):
        a.setuser(b"alice", [b"~b:*", b"bogus"])
    assert u.queues == [b"a:*"]
    assert a.setuser(b"alice", [b"~b:*"]) is u and u.queues == [b"a:*", b"b:*"]
    with pytest.raises(AclError):
        a.setuser(b"bad name", [])
    with pytest.raises(AclError):
        a.deluser(b"default")
    assert a.deluser(b"alice") and not a.deluser(b"alice")


def test_requirepass_is_the_default_users_password():
    a = Acl()
    assert not a.auth_required and a.default_nopass
    a.set_requirepass(b"pw")
    assert a.auth_required and a.authenticate(b"default", b"pw") is a.default
    assert a.authenticate(b"default", b"no") is None and a.authenticate(b"nobody", b"pw") is None
    a.set_requirepass(b"")
    assert not a.auth_required


def test_acl_log_groups_repeats_and_is_bounded():
    now = [100.0]
    a = Acl(clock=lambda: now[0])
    a.log_max = 3
    for _ in range(5):
        a.record(b"queue", b"b:1", b"alice", b"id=1 addr=1.2.3.4:5 x")
    assert len(a.log) == 1 and a.log[0].count == 5
    now[0] += 61
    a.record(b"queue", b"b:1", b"alice", b"id=1 addr=1.2.3.4:5 x")
    for i in range(5):
        a.record(b"command", b"c%d" % i, b"alice", b"id=1 addr=1.2.3.4:5 x")
    assert len(a.log) == 3 and a.log[0].object == b"c4"


def test_queue_verdicts_follow_the_rules_and_stay_bounded():
    a = Acl()
    u = a.setuser(b"t", [b"on", b"~a:*", b"+@all"])
    assert u.may_queue(b"a:1") and not u.may_queue(b"b:1")
    a.setuser(b"t", [b"~b:*"])  # the verdicts kept are not those of the old rules
    assert u.may_queue(b"b:1")
    a.setuser(b"t", [b"resetqueues", b"~c:*"])
    assert not u.may_queue(b"a:1") and not u.may_queue(b"b:1") and u.may_queue(b"c:1")
    for i in range(acl_mod.MAX_VERDICTS * 2):
        assert u.may_queue(b"c:%d" % i) and not u.may_queue(b"d:%d" % i)
    assert len(u.verdicts) <= acl_mod.MAX_VERDICTS


def test_a_bad_user_line_is_refused_by_the_config_with_the_acl_s_words(tmp_path):
    """The config checks each ``user`` line with the ACL's rules: in the
    file (with its place), on the command line, and CONFIG SET refuses the
    directive whatever the value."""
    from disque.config import Config, ConfigError, ConfigSetError

    path = tmp_path / "disque.conf"
    refusals = {
        "user a on bogus": "invalid value 'a on bogus' for 'user': Error in user declaration 'bogus': "
                           "Syntax error",
        "user a on >pw ~q:* +@nope": "invalid value 'a on >pw ~q:* +@nope' for 'user': Error in user "
                                     "declaration '+@nope': Unknown command or category name in ACL",
        "user bad\x01name on": "invalid value 'bad\x01name on' for 'user': Usernames can't contain spaces "
                               "or null characters",
    }
    for line, why in refusals.items():
        path.write_text("port 7711\n%s\n" % line)
        with pytest.raises(ConfigError) as e:
            Config.from_file(str(path))
        assert str(e.value) == "%s:2: %s (>>> %s)" % (path, why, line)
        with pytest.raises(ConfigError) as e:
            Config.defaults().apply_overrides({"user": line[len("user "):]})
        assert str(e.value) == "command-line option 'user': %s" % why
    with pytest.raises(ConfigSetError) as e:
        Config.defaults().set(b"user", b"a on bogus")
    assert e.value.args == (b"Unsupported CONFIG parameter: user",)
    config = Config.defaults()
    config.apply_overrides({"user": "a on >pw ~q:* +@all"})
    assert config["user"] == [["a", "on", ">pw", "~q:*", "+@all"]]
