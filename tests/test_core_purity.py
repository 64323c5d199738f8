"""The core must stay pure: no twisted, no sockets, no files, no clock."""

import ast
import pathlib

import disque.core

FORBIDDEN_MODULES = {"twisted", "socket", "select", "asyncio", "threading", "time", "datetime", "io"}
FORBIDDEN_CALLS = {"open", "print", "input"}


def core_files():
    return sorted(pathlib.Path(disque.core.__file__).parent.glob("*.py"))


def test_core_imports_nothing_impure():
    for path in core_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN_MODULES, "%s imports %s" % (path.name, name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in FORBIDDEN_CALLS, "%s calls %s()" % (path.name, node.func.id)


def test_the_check_can_fail(tmp_path):
    bad = "import twisted.internet\n"
    tree = ast.parse(bad)
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported[0].split(".")[0] in FORBIDDEN_MODULES
