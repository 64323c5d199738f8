"""One version string: setup.cfg reads ``disque.__version__``, and
``twistd disque --version`` (and ``disque-worker``'s) prints it beside the
Disque protocol version the node follows (INFO's ``disque_version``, the
original's 1.0-rc1: tests/protocol/test_protocol.py)."""

import configparser
import pathlib
import re

import pytest

import disque
from disque.node.tap import Options as NodeOptions
from disque.worker.tap import Options as WorkerOptions

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_setup_cfg_reads_the_version_from_the_package():
    cfg = configparser.ConfigParser()
    cfg.read(str(ROOT / "setup.cfg"))
    assert cfg["metadata"]["version"] == "attr: disque.__version__"


def test_the_version_is_a_plain_release_number_and_the_protocol_the_originals():
    assert re.fullmatch(r"\d+\.\d+\.\d+", disque.__version__)  # PEP 440 and semver alike
    assert disque.DISQUE_VERSION == "1.0-rc1"


@pytest.mark.parametrize("options", [NodeOptions, WorkerOptions])
def test_version_option_names_the_package_the_protocol_and_twisted(options, capsys):
    from twisted import copyright

    with pytest.raises(SystemExit) as stopped:
        options().parseOptions(["--version"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("disque %s (Disque protocol 1.0-rc1), Twisted %s, " % (disque.__version__, copyright.version))
    assert out == disque.version_text() + "\n"
