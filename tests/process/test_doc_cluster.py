"""docs/cluster.md's recipe, run as written.

The page's ``sh`` blocks marked ``<!-- recipe -->`` are joined in order
and run with ``bash -e`` in an empty directory, with this runtime's
``twistd`` first on the PATH and the real ``redis-cli``.  They use the
default ports (7711...7715): run as written, in a network namespace of
their own, where those ports are free by construction (nothing else lives
there), and a PID namespace, whose every process (the nodes the recipe put
in the background) the kernel kills when the recipe's shell ends or the
test dies (``unshare --kill-child`` dies with the test: PR_SET_PDEATHSIG).
Where no namespace can be made, the ports are moved to free ones of this
worker, the only change, and the nodes are stopped from their pid files.
"""

import glob
import os
import re
import shutil
import signal
import subprocess

from tests.support.process import ROOT, _die_with_parent, free_port, read_log, twistd_path

DOC = os.path.join(ROOT, "docs", "cluster.md")
DOC_PORTS = (7711, 7712, 7713, 7714, 7715)
_PROBLEM = []


def recipe(text):
    """The marked blocks of the page, in order, as one script."""
    return "".join(re.findall(r"^<!-- recipe -->\n```sh\n(.*?)^```\n", text, re.M | re.S))


def move_ports(script, ports):
    """``script`` with each of the page's ports replaced by one of ``ports``."""
    mapping = dict(zip(DOC_PORTS, ports))
    return re.sub(r"(?<![0-9])(771[1-5])(?![0-9])", lambda m: str(mapping[int(m.group(1))]), script)


def _unshare():
    return ["unshare", "--net", "--pid", "--fork", "--kill-child"] + (["--map-root-user"] if os.geteuid() else [])


def namespace_problem():
    """Why the recipe cannot run in namespaces of its own here, or None."""
    if not _PROBLEM:
        if not (shutil.which("unshare") and shutil.which("ip")):
            _PROBLEM.append("no unshare or ip command")
        else:
            p = subprocess.run(_unshare() + ["ip", "link", "set", "lo", "up"], capture_output=True, text=True,
                               timeout=30)
            _PROBLEM.append(None if p.returncode == 0 else "unshare: %s" % p.stderr.strip())
    return _PROBLEM[0]


def run_recipe(workdir, script, timeout=240):
    """Run ``script`` in ``workdir``; (exit status, output, how it ran)."""
    path = os.path.join(workdir, "recipe.sh")
    problem = namespace_problem()
    if problem is not None:
        script = move_ports(script, [free_port() for _ in DOC_PORTS])
    with open(path, "w") as f:
        f.write(script)
    env = dict(os.environ, PATH=os.path.dirname(twistd_path()) + os.pathsep + os.environ.get("PATH", ""))
    if problem is None:
        how = "as written, in namespaces of its own"
        argv = _unshare() + ["bash", "-c", 'ip link set lo up && exec bash -e "$0"', path]
    else:
        how = "with its ports moved (%s)" % problem
        argv = ["bash", "-e", path]
    try:
        p = subprocess.run(argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, preexec_fn=_die_with_parent)
        return p.returncode, p.stdout.decode(errors="replace"), how
    finally:
        if problem is not None:  # outside a PID namespace the nodes are ours to stop
            for pidfile in glob.glob(os.path.join(workdir, "n*", "twistd.pid")):
                try:
                    os.kill(int(open(pidfile).read()), signal.SIGKILL)
                except (OSError, ValueError):
                    pass


def logs(workdir):
    return "\n".join("== %s\n%s" % (path, read_log(path)[-3000:])
                     for path in sorted(glob.glob(os.path.join(workdir, "n*", "node.log"))))


def test_the_recipe_is_all_the_shell_blocks_that_change_something():
    """Every sh block of the page is in the recipe (none left out by a lost
    marker), and moving the ports changes the port numbers only."""
    with open(DOC) as f:
        text = f.read()
    script = recipe(text)
    blocks = len(re.findall(r"^```sh$", text, re.M))
    assert blocks == len(re.findall(r"^<!-- recipe -->\n```sh$", text, re.M)) == 9
    assert script.count("\ntwistd ") == 6 and script.count("\n") > 9 * 2
    moved = move_ports(script, (1001, 1002, 1003, 1004, 1005))
    assert not re.search("771[1-5]", moved) and "17711" not in script
    assert re.sub("100[1-5]", "", moved) == re.sub("771[1-5]", "", script)


def test_the_cluster_page_recipe_runs_as_written(tmp_path):
    with open(DOC) as f:
        script = recipe(f.read())
    status, out, how = run_recipe(str(tmp_path), script)
    report = "recipe run %s; exit status %d; output:\n%s\n%s" % (how, status, out, logs(str(tmp_path)))
    assert status == 0, report
    lines = out.splitlines()
    # Three nodes by their seeds alone.
    assert "cluster_reachable_nodes:2" in lines and "cluster_known_nodes:3" in lines, report
    # The job added on the first node, from the third.
    got = lines.index("hello") if "hello" in lines else -1
    assert got >= 2 and lines[got - 2] == "q" and lines[got - 1].startswith("D-") and lines[got + 1] == "1", report
    # The fourth node met by hand (OK), left (OK), forgotten on each node
    # (OK), and three again.
    assert lines.count("OK") == 5, report
    assert lines[len(lines) - 1 - lines[::-1].index("OK") + 1] == "cluster_known_nodes:3", report
    # The second node on n1's node file refused, in one line.
    refusal = [line for line in lines if line.startswith("disque: ")]
    assert len(refusal) == 1 and re.fullmatch(
        r"disque: the node file n1/nodes\.conf is in use by another node \(pid \d+\): each node needs a dir, "
        r"or a cluster-config-file, of its own", refusal[0]), report
    assert "refused (exit status 1)" in lines, report
    assert "Traceback" not in out + logs(str(tmp_path)), report
    for i in (1, 2, 3):
        log = read_log(str(tmp_path / ("n%d" % i) / "node.log"))
        assert log.count("joined the cluster") >= 2 and "In the cluster through seed" in log, report
