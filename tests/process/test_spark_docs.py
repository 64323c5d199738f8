"""The Spark connector's documentation runs as written: the first example
of docs/spark.md (a complete script) and the commands of
examples/spark/README.md, each script in a driver process of its own
against real nodes, as a user runs them: no PYSPARK_PYTHON set, and a
``python3`` on PATH that has none of disque's dependencies."""

import json
import os
import re
import shlex
import subprocess
import sys

from tests.support.process import ROOT
from tests.support.spark import bare_python, qlen, script_env, total_qlen

DOC = os.path.join(ROOT, "docs", "spark.md")
FIRST_EXAMPLE = "# docs/spark.md, first example"
EXAMPLES = os.path.join(ROOT, "examples", "spark")
SCRIPT_TIMEOUT = 300


def read(path):
    with open(path) as f:
        return f.read()


def first_example():
    """The Python block of docs/spark.md that starts with FIRST_EXAMPLE."""
    blocks = re.findall(r"^```python\n(.*?)^```", read(DOC), re.S | re.M)
    found = [block for block in blocks if block.startswith(FIRST_EXAMPLE)]
    assert len(found) == 1, "docs/spark.md has %d blocks starting with %r" % (len(found), FIRST_EXAMPLE)
    return found[0]


def run(argv, cwd, env):
    """Run a driver script to its end; its stdout (failing with its output)."""
    p = subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    assert p.returncode == 0, "%s exited with %s:\n%s\n%s" % (argv, p.returncode, p.stdout, p.stderr[-6000:])
    return p.stdout


def tables(text):
    """The tables ``DataFrame.show()`` printed: lists of rows (cells
    stripped), the header row first."""
    out, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line[1:-1].split("|")])
        elif not line.startswith("+-") and rows:
            out.append(rows)
            rows = []
    return out


def test_first_example_of_the_doc_runs_as_written(node, tmp_path):
    script = tmp_path / "first_job.py"
    script.write_text(first_example())
    env = script_env(path_first=bare_python(tmp_path / "bare"), DISQUE_NODES="127.0.0.1:%d" % node.port)
    out = run([sys.executable, str(script)], tmp_path, env)
    written, shipped = tables(out)
    assert written[0] == ["id", "body", "state"], out
    assert sorted((body, state) for _, body, state in written[1:]) == [
        ("parcel 1", "queued"), ("parcel 2", "queued"), ("parcel 3", "queued")], out
    assert all(job_id.startswith("D-") for job_id, _, _ in written[1:]), out
    assert shipped == [["body"], ["parcel 1 shipped"], ["parcel 2 shipped"], ["parcel 3 shipped"]], out
    # The streaming query consumed (acknowledged) the parcels.
    assert qlen(node, "parcels") == 0
    assert qlen(node, "shipped") == 3


def readme_commands():
    """The ``.venv/bin/python examples/spark/...`` commands of
    examples/spark/README.md, in order, as argument lists."""
    text = read(os.path.join(EXAMPLES, "README.md")).replace("\\\n", " ")
    return [shlex.split(line) for line in (raw.strip() for raw in text.splitlines())
            if line.startswith(".venv/bin/python examples/spark/")]


def test_examples_readme_commands_run(trio, tmp_path):
    """The README's commands, run from the repository's root as it says,
    with the addresses of three real nodes for 127.0.0.1:7711..7713, fewer
    orders, a checkpoint in tmp_path and ``--available-now`` (which the
    README offers) so that the streaming job stops."""
    ports = {"771%d" % (i + 1): str(n.port) for i, n in enumerate(trio)}
    commands = readme_commands()
    assert [c[1] for c in commands] == ["examples/spark/producer.py", "examples/spark/orders_job.py",
                                        "examples/spark/check.py"], commands
    env = script_env(path_first=bare_python(tmp_path / "bare"))
    outputs = []
    for command in commands:
        argv = [sys.executable] + [re.sub(r"127\.0\.0\.1:(771[123])\b", lambda m: "127.0.0.1:" + ports[m.group(1)], a)
                                   for a in command[1:]]
        if "--count" in argv:
            argv[argv.index("--count") + 1] = "200"
        if "--checkpoint" in argv:
            argv[argv.index("--checkpoint") + 1] = str(tmp_path / "orders-ckpt")
            argv.append("--available-now")
        outputs.append(run(argv, ROOT, env))
    produced, _, checked = outputs
    assert produced.strip() == "added 200 jobs to orders", produced
    counts, results = tables(checked)
    assert counts[0] == ["queue", "state", "count"], checked
    assert ["totals", "queued", "200"] in counts[1:], checked
    assert results[0] == ["result"] and len(results) == 6, checked
    assert all(set(json.loads(r[0])) == {"order", "item", "total"} for r in results[1:]), checked
    assert total_qlen(trio, "orders") == 0
    assert total_qlen(trio, "totals") == 200

