"""Every line runs on Python 3.9 (Debian's PyPy), checked from CPython so a
slip shows in the fast tiers, not only in CI's PyPy run: the syntax of 3.9,
no ``X | Y`` in an annotation Python evaluates (a ``def`` or a class body
without ``from __future__ import annotations``), and none of the 3.10+
calls that are easy to reach for."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREES = ("disque", "twisted/plugins", "tests", "benchmarks", "examples")

# (function, keyword argument) -> what it needs; other functions may take
# keywords of these names (pytest.mark.xfail(strict=True) does)
NEWER_KEYWORDS = {("zip", "strict"): "zip(strict=...) is 3.10", ("dataclass", "slots"): "dataclass(slots=...) is 3.10",
                  ("dataclass", "kw_only"): "dataclass(kw_only=...) is 3.10"}
NEWER_NAMES = {"pairwise": "itertools.pairwise is 3.10", "bit_count": "int.bit_count is 3.10",
               "aiter": "aiter is 3.10", "anext": "anext is 3.10", "TypeAlias": "typing.TypeAlias is 3.10",
               "ParamSpec": "typing.ParamSpec is 3.10"}


def problems(source: str, name: str = "<source>"):
    """What in ``source`` would not run on Python 3.9, as 'line: why'."""
    try:
        tree = ast.parse(source, name, feature_version=(3, 9))
    except SyntaxError as e:
        return ["%s: not 3.9 syntax (%s)" % (e.lineno, e.msg)]
    lazy = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body)
    found = []
    for node in ast.walk(tree):
        annotations = []
        if not lazy and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations += [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs
                            + [args.vararg, args.kwarg] if a is not None and a.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
        if not lazy and isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in annotations:
            if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(annotation)):
                found.append("%d: 'X | Y' in an evaluated annotation is 3.10 (use Optional/Union)"
                             % annotation.lineno)
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            for kw in node.keywords:
                if (called, kw.arg) in NEWER_KEYWORDS:
                    found.append("%d: %s" % (node.lineno, NEWER_KEYWORDS[called, kw.arg]))
        if isinstance(node, ast.Attribute) and node.attr in NEWER_NAMES:
            found.append("%d: %s" % (node.lineno, NEWER_NAMES[node.attr]))
        if isinstance(node, ast.Name) and node.id in NEWER_NAMES:
            found.append("%d: %s" % (node.lineno, NEWER_NAMES[node.id]))
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in NEWER_NAMES:
                    found.append("%d: %s" % (node.lineno, NEWER_NAMES[alias.name]))
    return found


def sources():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            yield path


def test_every_module_runs_on_python_3_9():
    report = ["%s:%s" % (path.relative_to(ROOT), p) for path in sources()
              for p in problems(path.read_text(), str(path))]
    assert not report, "\n".join(report)


def test_the_check_sees_what_3_9_cannot_run():
    assert problems("def f(x: bytes | None = None): pass")[0].startswith("1: 'X | Y'")
    assert problems("x: int | str = 1")
    assert "not 3.9 syntax" in problems("match x:\n    case 1: pass\n")[0]
    assert problems("list(zip(a, b, strict=True))") == ["1: zip(strict=...) is 3.10"]
    assert problems("@dataclasses.dataclass(slots=True)\nclass A: pass") == ["1: dataclass(slots=...) is 3.10"]
    assert problems("pytest.mark.xfail(reason='r', strict=True)") == []  # not zip's
    assert problems("from itertools import pairwise") == ["1: itertools.pairwise is 3.10"]
    assert problems("n = (5).bit_count()") == ["1: int.bit_count is 3.10"]


@pytest.mark.parametrize("source", [
    "from __future__ import annotations\ndef f(x: bytes | None = None): pass",
    "def f(x: 'bytes | None' = None): pass",
    "from typing import Optional\ndef f(x: Optional[bytes] = None): pass",
    "flags = 1 | 2",
])
def test_what_3_9_runs_passes(source):
    assert problems(source) == []
