"""A previous version of the node, taken from this repository's history:
its ``disque`` package and twistd plugin, extracted with ``git archive``.
A node process run with ``PYTHONPATH`` pointing at the extracted tree
imports them instead of this version's (the rolling-upgrade tests, the
AOF across versions)."""

import io
import os
import subprocess
import tarfile

import pytest

from .process import ROOT


def extract(commit, dest):
    """The ``disque`` package and twistd plugin of ``commit``, extracted in
    ``dest``; returns ``dest`` (the tree to put on ``PYTHONPATH``)."""
    try:
        found = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "%s^{commit}" % commit],
                               capture_output=True, text=True, timeout=30)
    except OSError as e:
        pytest.fail("this test needs git and the repository's history (commit %s): %s" % (commit, e))
    if found.returncode != 0:
        pytest.fail("this test needs the repository's history: commit %s is not in %s (a shallow clone? fetch "
                    "it with `git fetch --unshallow`): %s" % (commit, ROOT, found.stderr.strip()))
    archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", commit, "disque", "twisted"],
                             capture_output=True, timeout=60)
    assert archive.returncode == 0, archive.stderr.decode(errors="replace")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # (Python 3.12+, and the security updates of older ones)
            tar.extractall(str(dest), filter="data")
        else:
            tar.extractall(str(dest))
    assert os.path.exists(os.path.join(str(dest), "twisted", "plugins", "disque_plugin.py"))
    return str(dest)
