"""The core must stay pure: no twisted, no sockets, no files, no clock, and
no import of the rest of the package (whose adapters are impure).  Every
module below ``disque/core`` is read, subpackages included; relative
imports are resolved, so ``from ..node.service import x`` is caught too.

And the packages import down their layers only (:data:`LAYERS`): no
import, at the top of a module or inside a function, runs back up."""

import ast
import pathlib

import disque.core

FORBIDDEN_MODULES = {"twisted", "socket", "select", "asyncio", "threading", "time", "datetime", "io"}
FORBIDDEN_CALLS = {"open", "print", "input"}
# Calls that read a clock, whatever they are called on (datetime.now()...).
FORBIDDEN_METHODS = {"now", "utcnow", "today"}
# Allowed imports of a forbidden module, with the reason: the schedules'
# calendar arithmetic turns the times it is given into dates in a time zone
# and back (datetime.fromtimestamp with a zone); FORBIDDEN_METHODS keeps it
# from reading the clock.
ALLOWED = {("cronspec", "datetime")}
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
        if top in FORBIDDEN_MODULES and (str(rel), name) not in ALLOWED:
            found.append("%s imports %s" % (rel, name))
        elif top == package.split(".")[0] and not (name + ".").startswith(package + "."):
            found.append("%s imports %s, outside %s" % (rel, name, package))
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                found.append("%s calls %s()" % (rel, node.func.id))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in FORBIDDEN_METHODS:
                found.append("%s calls .%s()" % (rel, node.func.attr))
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
    (root / "cronspec.py").write_text("import datetime\nx = datetime.datetime.now()\n")  # allowed import, not a clock
    (root / "dates.py").write_text("import datetime\n")  # allowed to cronspec only
    found = violations(root)
    assert found == [
        "bad imports twisted.internet",
        "bad imports disque.node.service, outside disque.core",
        "dates imports datetime",
        "sub/deep imports time",
        "cronspec calls .now()",
        "sub/deep calls open()",
    ]


def test_the_resp_adapter_does_not_import_the_command_layer():
    """Commands use the adapter's reply vocabulary (disque.resp.reply) and
    the handler/protocol contract (disque.contract, a seam below both that
    imports nothing); the protocol runs requests through the runtime's
    front door: imports go one way."""
    import disque.commands
    import disque.resp

    resp = pathlib.Path(disque.resp.__file__).parent
    upward = [(str(rel), name) for rel, name in imports(resp, "disque.resp")
              if name.startswith(("disque.commands", "disque.node"))]
    assert upward == []
    assert imports_of(resp.parent / "contract.py") == []
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


# -- the layers ---------------------------------------------------------------

#: Each part of ``disque`` (a subpackage, or a module of the package itself)
#: and its layer (docs/architecture.md).  A module imports parts of lower
#: layers only, and of its own layer only where SIDEWAYS names the pair.
LAYERS = {
    # imports nothing of the project
    "io": 0, "contract": 0,
    # the pure core, the config, the plugin interfaces
    "core": 1, "config": 1, "interfaces": 1,
    # the bus, who may do what, strategies by name
    "bus": 2, "access": 2, "plugins": 2,
    # RESP, persistence strategies, federation policies
    "resp": 3, "persistence": 3, "federation": 3,
    # the command table, the clients, the command-line tools
    "commands": 4, "client": 4, "tools": 4,
    # the node runtime and what stands on it
    "node": 5, "http": 5, "spark": 5, "worker": 5, "testing": 5,
}
SIDEWAYS = {
    ("persistence", "resp"): "the AOF is RESP: its scanner reads records with the RESP codec",
    ("node", "http"): "the service builds the HTTP side's access site",
    ("testing", "node"): "IOSimCluster runs real node services",
}


def part_of(name: str):
    """The part of ``disque`` a module name belongs to; "" for the package
    itself (``disque``, ``from .. import DISQUE_VERSION``), None outside."""
    parts = name.split(".")
    if parts[0] != "disque":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def upward_imports(root: pathlib.Path) -> list:
    """Every import of a module below ``root`` (the directory of the
    ``disque`` package) that runs back up, or sideways where SIDEWAYS does
    not allow it, as readable strings; and every part with no layer."""
    found = []
    for path in sorted(root.iterdir()):
        name = path.stem if path.suffix == ".py" else path.name
        if (path.suffix == ".py" or (path / "__init__.py").exists()) and name != "__init__" \
                and name not in LAYERS:
            found.append("disque.%s has no layer in LAYERS" % name)
    for rel, name in imports(root, "disque"):
        src, dst = part_of(".".join(("disque",) + rel.parts)), part_of(name)
        if not src or not dst or src == dst:
            continue
        if LAYERS[dst] > LAYERS[src] or LAYERS[dst] == LAYERS[src] and (src, dst) not in SIDEWAYS:
            found.append("%s imports %s: %s (layer %d) -> %s (layer %d)" % (
                rel, name, src, LAYERS[src], dst, LAYERS[dst]))
    return found


def test_no_import_runs_back_up_the_layers():
    root = pathlib.Path(disque.core.__file__).parent.parent
    assert upward_imports(root) == []


def test_the_layer_check_can_fail(tmp_path):
    """Planted: an import up (lazy, in a function), one sideways, a part
    with no layer; imports down, within a part and of the package itself
    pass."""
    root = tmp_path / "disque"
    for part in ("resp", "bus", "node", "extra"):
        (root / part).mkdir(parents=True)
        (root / part / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "contract.py").write_text("")
    (root / "resp" / "protocol.py").write_text(
        "from .. import DISQUE_VERSION\nfrom ..contract import BLOCKED\nfrom .codec import parse\n"
        "def f():\n    from ..node.service import x\n")
    (root / "bus" / "links.py").write_text("import disque.access.acl\nfrom ..core import node\n")
    (root / "node" / "service.py").write_text("from ..resp import protocol\nfrom ..http import site\n")
    assert upward_imports(root) == [
        "disque.extra has no layer in LAYERS",
        "bus/links imports disque.access.acl: bus (layer 2) -> access (layer 2)",
        "resp/protocol imports disque.node.service: resp (layer 3) -> node (layer 5)",
    ]
