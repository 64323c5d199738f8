"""The node file (``cluster-config-file``): the node's ID and the cluster it
knows, saved whenever the cluster view changes and read at start-up.

Invariants: the file is replaced crash-safely (temp file, fsync, rename,
directory fsync: :func:`disque.io.files.atomic_write`); the
cluster stays dirty until it is written, so a failed save is retried (at
most once a tick), logged once until it works again, and shown by INFO
(``nodes_file_status``).
"""

import os
import tempfile

from ..io import files
from ..core.node_file_format import parse_nodes_file
from ..io.files import atomic_write
from ..io.logs import logger

log = logger("disque")


class NodeFileError(Exception):
    """The node file exists but cannot be used, or cannot be written at
    start-up: start-up stops."""


def check_writable(path):
    """Start-up: raise NodeFileError unless a file can be made in the
    directory of the node file ``path`` (``dir``, unless
    ``cluster-config-file`` names another), as the original, which writes
    its nodes.conf at start-up, stops on a directory it cannot write:
    else the node would run, unable to save its ID, and log it every tick.
    A probe file, made and removed at once; not through ``files.OS``,
    whose calls tests record."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".disque-probe-", dir=os.path.dirname(path) or ".")
    except OSError as e:
        raise NodeFileError("can't write the node file %s (dir, cluster-config-file): %s"
                            % (path, e.strerror or e)) from None
    os.close(fd)
    os.unlink(probe)


def load_nodes_file(path):
    """``(my_id, leaving, peers)`` from the node file, or None if there is
    none yet."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NodeFileError("cannot read the node file %s: %s" % (path, e.strerror))
    try:
        return parse_nodes_file(text)
    except ValueError as e:
        raise NodeFileError("bad node file %s: %s (fix or remove it)" % (path, e))


class NodeFile:
    """Saves one node's cluster view to ``path`` (None: not kept, as in
    in-memory tests)."""

    def __init__(self, path, config, clock):
        self.path = path
        self.config = config
        self.clock = clock  # reactor.seconds
        self.files = files.OS  # the door to the disk (tests replace it)
        self.error = None  # why the last save failed
        self.retry = 0.0  # not before this time (seconds) after a failure

    def due(self) -> bool:
        """Whether a dirty cluster is saved now (not while a failed save
        waits for its retry)."""
        return self.error is None or self.clock() >= self.retry

    def save(self, cluster):
        """Write the file; return an error text or None."""
        if self.path is None:
            cluster.dirty = False
            return None
        now = self.clock()
        try:
            atomic_write(self.files, self.path, cluster.nodes_file_text())
        except OSError as e:
            self.retry = now + 1.0 / max(self.config["hz"], 1)
            text = e.strerror or str(e)
            if self.error is None:
                log.error("Could not save the node file {path}: {error} (retried every tick)",
                          path=self.path, error=text)
            self.error = text
            return text
        cluster.dirty = False
        if self.error is not None:
            log.warn("The node file {path} is saved again", path=self.path)
            self.error = None
        return None

    def info(self):
        """INFO's persistence fields for the file: only while saving fails."""
        if self.path is not None and self.error is not None:
            return [("nodes_file_status", "err"), ("nodes_file_error", self.error)]
        return []
