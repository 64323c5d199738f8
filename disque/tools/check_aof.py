"""Check (and repair) a disque append only file.

    python -m disque.tools.check_aof [--fix | --drop-damaged] disque.aof

Reads every record as the node would at start-up, checksums included.
Reports the number of good records (and how many of them are catalog
entries, if any) and, if the file is damaged, each damaged part: its
offset, what is wrong (a checksum mismatch, bytes that are not records)
and the jobs or catalog entry it names, as far as they can be read; then
a truncated tail, if any.  A file that cannot be read on past some offset
(a record this version does not understand, or damage with no whole
checksummed record after it) is reported at that offset.

Two repairs, each after writing a ``.bak`` copy of the file:

``--fix``
    truncates the file at the end of the last good record before the first
    damage, as the original's tool: everything after it is lost.
``--drop-damaged``
    removes only the damaged parts (what ``aof-load-damaged skip`` loads
    without) and a truncated tail: the records after a damaged one stay.
    The jobs of the records removed come back only from other nodes holding
    copies, and a job whose DELJOB is removed comes back.

Exit status: 0 the file is good (or was repaired), 1 damaged, 2 usage error.
"""

import argparse
import os
import shutil
import sys

from ..io.files import OS, atomic_write
from ..persistence.records import CATALOG, DAMAGE, AOFError
from ..persistence.scan import scan_records

COPY_CHUNK = 1 << 20


class Report:
    """What :func:`check` found in a file: ``records`` good records,
    ``catalog`` of them CATALOG records, ``damage`` (a list of Damage),
    ``good``: where the last whole record ends (the torn tail starts),
    ``size``, and ``stop``: the AOFError past which the file cannot be
    read, if any."""

    def __init__(self, size):
        self.size = size
        self.records = 0
        self.catalog = 0
        self.damage = []
        self.good = 0
        self.stop = None

    @property
    def first_problem(self):
        """The offset of the first damage or the stop, or None."""
        offsets = [d.offset for d in self.damage[:1]]
        if self.stop is not None:
            offsets.append(self.stop.offset or 0)
        return min(offsets) if offsets else None

    @property
    def valid(self):
        return not self.damage and self.stop is None and self.good == self.size


def check(path):
    """A :class:`Report` of the file at ``path``."""
    report = Report(os.path.getsize(path))
    try:
        for kind, value, end in scan_records(path, skip_damaged=True):
            if kind is None:
                report.good = end
            elif kind is DAMAGE:
                report.damage.append(value)
                report.good = end
            else:
                report.records += 1
                report.catalog += kind is CATALOG
                report.good = end
    except AOFError as e:
        report.stop = e
    return report


def drop_damaged(path, report):
    """Rewrite ``path`` without the damaged parts and the torn tail, through
    the one atomic write (temp file, fsync, rename, directory fsync), with
    the file's permission bits.  Returns the bytes removed."""
    keep, at = [], 0
    for d in report.damage:
        keep.append((at, d.offset))
        at = d.end
    keep.append((at, report.good))
    with open(path, "rb") as src:
        atomic_write(OS, path, _chunks(src, keep, path), os.stat(path).st_mode & 0o777)
    return report.size - sum(stop - start for start, stop in keep)


def _chunks(src, keep, path):
    """The bytes of ``src`` in the ``(start, stop)`` ranges of ``keep``, in
    chunks of at most COPY_CHUNK bytes."""
    for start, stop in keep:
        src.seek(start)
        left = stop - start
        while left > 0:
            data = src.read(min(COPY_CHUNK, left))
            if not data:
                raise OSError("%s changed while it was repaired" % path)
            yield data
            left -= len(data)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m disque.tools.check_aof", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--fix", action="store_true", help="truncate the file after its last good record")
    how.add_argument("--drop-damaged", action="store_true",
                     help="remove only the damaged records (and a truncated tail)")
    ap.add_argument("file")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.file):
        print("no such file: %s" % args.file, file=sys.stderr)
        return 2
    report = check(args.file)
    catalog = ""
    if report.catalog:
        catalog = " (%d catalog %s)" % (report.catalog, "entry" if report.catalog == 1 else "entries")
    if report.valid:
        print("AOF is valid: %d records%s, %d bytes" % (report.records, catalog, report.size))
        return 0
    first = report.first_problem
    damaged = sum(d.records for d in report.damage)
    print("AOF is damaged: %d good records%s, %d damaged, %d bytes"
          % (report.records, catalog, damaged, report.size))
    for d in report.damage:
        print(d.describe())
    if report.stop is not None:
        print("cannot read on: %s" % report.stop)
    elif report.good < report.size:
        print("truncated record at the end (offset %d, %d bytes)" % (report.good, report.size - report.good))
        if first is None:
            first = report.good
    if args.fix:
        _backup(args.file)
        with open(args.file, "r+b") as f:
            f.truncate(first)
        print("fixed: truncated to %d bytes (a copy of the original is in %s.bak)" % (first, args.file))
        return 0
    if args.drop_damaged:
        if report.stop is not None:
            print("cannot drop only the damaged records: the file cannot be read on past offset %d; "
                  "--fix truncates it there" % (report.stop.offset or 0))
            return 1
        _backup(args.file)
        removed = drop_damaged(args.file, report)
        print("fixed: removed %d damaged parts and %d bytes of torn tail (%d bytes in all); %d records kept "
              "(a copy of the original is in %s.bak)"
              % (len(report.damage), report.size - report.good, removed, report.records, args.file))
        return 0
    print("run again with --fix to truncate it at offset %d (%d bytes lost)" % (first, report.size - first))
    if report.stop is None and report.damage:
        print("or with --drop-damaged to remove only the damaged parts (%d bytes)"
              % (sum(d.size for d in report.damage) + report.size - report.good))
    return 1


def _backup(path):
    shutil.copyfile(path, path + ".bak")


if __name__ == "__main__":
    sys.exit(main())
