"""tests/tools/smoke_wheel.py (run by .ci/run on the built wheel): its check
of the wheel's contents, on wheels made here."""

import zipfile

from tests.tools.smoke_wheel import missing_from, wheel_version

REQUIRED = ["twisted/plugins/disque_plugin.py", "disque/http/static/index.html", "disque/http/static/app.js",
            "disque/__init__.py", "disque/node/tap.py"]


def _wheel(path, names):
    with zipfile.ZipFile(str(path), "w") as z:
        for name in names:
            z.writestr(name, "")
    return str(path)


def test_the_plugin_the_dashboard_and_every_module_are_required(tmp_path):
    needed = missing_from(_wheel(tmp_path / "empty.whl", []))
    assert set(REQUIRED) <= set(needed)
    assert not [n for n in needed if "__pycache__" in n or n.endswith(".pyc")]
    assert missing_from(_wheel(tmp_path / "complete.whl", needed)) == []
    partial = _wheel(tmp_path / "partial.whl", [n for n in needed if n not in REQUIRED])
    assert missing_from(partial) == sorted(REQUIRED)


def test_the_version_comes_from_the_wheels_name():
    assert wheel_version("/x/disque-0.1.0-py3-none-any.whl") == "0.1.0"
