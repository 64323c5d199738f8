"""The one atomic write (disque.io.files.atomic_write) and its
users outside persistence: CONFIG REWRITE's config file and check_aof's
repair go through it, with their files' permission bits."""

import os
import stat

import pytest

from disque.config.rewrite import write_config
from disque.io.files import FileSystem, atomic_write


class Recording(FileSystem):
    def __init__(self):
        self.calls = []

    def fsync(self, fd):
        self.calls.append("fsync")
        super().fsync(fd)

    def replace(self, src, dst):
        self.calls.append("replace")
        super().replace(src, dst)

    def fsync_dir(self, path):
        self.calls.append("fsync_dir")
        super().fsync_dir(path)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_is_private_and_made_durable_in_order(tmp_path):
    fs = Recording()
    atomic_write(fs, str(tmp_path / "f"), b"data")
    assert (tmp_path / "f").read_bytes() == b"data"
    assert mode(tmp_path / "f") == 0o600
    assert fs.calls == ["fsync", "replace", "fsync_dir"]
    assert os.listdir(tmp_path) == ["f"]


def test_chunks_and_an_exact_mode(tmp_path):
    atomic_write(Recording(), str(tmp_path / "f"), iter([b"ab", b"", b"cd"]), 0o640)
    assert (tmp_path / "f").read_bytes() == b"abcd"
    assert mode(tmp_path / "f") == 0o640


def test_an_error_of_the_chunks_leaves_the_old_file_and_no_temp(tmp_path):
    (tmp_path / "f").write_bytes(b"old")

    def chunks():
        yield b"new"
        raise OSError("source changed")

    with pytest.raises(OSError, match="source changed"):
        atomic_write(Recording(), str(tmp_path / "f"), chunks())
    assert (tmp_path / "f").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_the_config_file_keeps_its_mode_and_a_new_one_is_0644(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_bytes(b"port 1\n")
    os.chmod(path, 0o604)
    fs = Recording()
    write_config(str(path), b"port 2\n", fs)
    assert path.read_bytes() == b"port 2\n" and mode(path) == 0o604
    assert fs.calls == ["fsync", "replace", "fsync_dir"]  # (the directory's fsync is new for config files)
    write_config(str(tmp_path / "new.conf"), b"port 3\n")
    assert mode(tmp_path / "new.conf") == 0o644
