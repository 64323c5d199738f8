"""disque.commands.args.subcommand: the arity table of a command with
subcommands (CONFIG, CLIENT, CLUSTER, SLOWLOG, LATENCY, DEBUG, ACL,
COMMAND declare theirs with it)."""

from disque.commands.args import subcommand

ARITY = {b"get": 3, b"kill": -3, b"leaving": (2, 3)}


def test_a_declared_subcommand_in_any_case_and_its_arity():
    assert subcommand([b"CONFIG", b"GeT", b"x"], ARITY) == (b"get", True)
    assert subcommand([b"CONFIG", b"get"], ARITY) == (b"get", False)
    assert subcommand([b"CONFIG", b"get", b"x", b"y"], ARITY) == (b"get", False)


def test_at_least_n_and_a_tuple_of_counts():
    assert subcommand([b"CLIENT", b"kill"], ARITY) == (b"kill", False)
    assert subcommand([b"CLIENT", b"kill", b"a"], ARITY) == (b"kill", True)
    assert subcommand([b"CLIENT", b"kill", b"a", b"b", b"c"], ARITY) == (b"kill", True)
    assert [subcommand([b"CLUSTER", b"leaving"] + [b"x"] * n, ARITY)[1] for n in range(3)] == [True, True, False]


def test_an_undeclared_subcommand_never_fits():
    assert subcommand([b"CONFIG", b"bogus", b"x"], ARITY) == (None, False)


def test_acl_declares_an_arity_for_each_of_its_handlers():
    from disque.commands import acl

    assert set(acl.ARITY) == set(acl.SUBCOMMANDS)
