"""The core must stay pure: no twisted, no sockets, no files, no clock, and
no import of the rest of the package (whose adapters are impure).  Every
module below ``disque/core`` is read, subpackages included; relative
imports are resolved, so ``from ..node.service import x`` is caught too."""

import ast
import pathlib

import disque.core

FORBIDDEN_MODULES = {"twisted", "socket", "select", "asyncio", "threading", "time", "datetime", "io"}
FORBIDDEN_CALLS = {"open", "print", "input"}
PACKAGE = "disque.core"


def imports(root: pathlib.Path, package: str):
    """(module, imported name) for every import in the modules below
    ``root`` (the directory of ``package``), relative imports resolved."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = package.split(".") + [p for p in rel.parts if p != "__init__"]
        # the package a relative import is resolved against
        here = parts if path.name == "__init__.py" else parts[:-1]
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield rel, a.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                    if node.module:
                        yield rel, ".".join(base + [node.module])
                    else:  # from .. import x: the module x of that package
                        for a in node.names:
                            yield rel, ".".join(base + [a.name])
                else:
                    yield rel, node.module


def violations(root: pathlib.Path, package: str = PACKAGE) -> list:
    """Every impure import or call in the modules below ``root`` (the
    directory of ``package``), as readable strings."""
    found = []
    for rel, name in imports(root, package):
        top = name.split(".")[0]
        if top in FORBIDDEN_MODULES:
            found.append("%s imports %s" % (rel, name))
        elif top == package.split(".")[0] and not (name + ".").startswith(package + "."):
            found.append("%s imports %s, outside %s" % (rel, name, package))
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                found.append("%s calls %s()" % (rel, node.func.id))
    return found


def test_core_imports_nothing_impure():
    root = pathlib.Path(disque.core.__file__).parent
    assert list(root.rglob("*.py")), "no core modules found"
    assert violations(root) == []


def test_the_check_can_fail(tmp_path):
    """Planted impurities, one per kind, in a module and in a subpackage."""
    root = tmp_path / "core"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "ok.py").write_text("import heapq\nfrom . import job\nfrom .job import Job\n")
    (root / "bad.py").write_text("import twisted.internet\nfrom ..node.service import x\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "deep.py").write_text("from time import monotonic\nfrom .. import ok\nopen('f')\n")
    found = violations(root)
    assert found == [
        "bad imports twisted.internet",
        "bad imports disque.node.service, outside disque.core",
        "sub/deep imports time",
        "sub/deep calls open()",
    ]


def test_the_resp_adapter_does_not_import_the_command_layer():
    """Commands use the adapter's reply vocabulary (disque.resp.reply) and
    its handler/protocol contract (disque.resp.contract, which imports
    nothing); the protocol runs requests through the runtime's front door:
    imports go one way."""
    import disque.commands
    import disque.resp

    resp = pathlib.Path(disque.resp.__file__).parent
    upward = [(str(rel), name) for rel, name in imports(resp, "disque.resp")
              if name.startswith(("disque.commands", "disque.node"))]
    assert upward == []
    assert imports_of(resp / "contract.py") == []
    commands = pathlib.Path(disque.commands.__file__).parent
    assert [(str(rel), name) for rel, name in imports(commands, "disque.commands")
            if name.startswith(("disque.node", "disque.resp.protocol"))] == []
    # and the check sees an upward import when there is one
    assert [(str(r), n) for r, n in _planted_upward_import()] == [("x", "disque.commands")]


def imports_of(path: pathlib.Path) -> list:
    """The import statements of the one module ``path``."""
    return [node for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, (ast.Import, ast.ImportFrom))]


def _planted_upward_import():
    import tempfile

    root = pathlib.Path(tempfile.mkdtemp()) / "resp"
    root.mkdir()
    (root / "x.py").write_text("from .. import commands\n")
    return list(imports(root, "disque.resp"))
