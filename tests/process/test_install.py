"""The installed package, as the README's quick start installs it, exposes
the ``disque`` twistd plugin to a process started anywhere, with no
PYTHONPATH help."""

import os
import subprocess

from tests.support.process import twistd_path


def test_twistd_lists_the_disque_plugin_from_any_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([twistd_path(), "--help"], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=60).stdout
    names = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()]
    assert "disque" in names, out


def test_plugin_options_describe_the_node(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([twistd_path(), "disque", "--help"], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for option in ("--port", "--bind", "--config", "--dir"):
        assert option in p.stdout
