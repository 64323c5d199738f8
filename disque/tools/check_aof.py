"""Check (and repair) a disque append only file.

    python -m disque.tools.check_aof [--fix] disque.aof

Reads every record as the node would at start-up.  Reports the number of
good records and, if the file is damaged, the offset where the last good
record ends and what follows it.  ``--fix`` truncates the file there (after
writing a ``.bak`` copy): a truncated tail loses only the torn record; damage
in the middle loses everything after it, so look before you fix.
Exit status: 0 the file is good (or was fixed), 1 damaged, 2 usage error.
"""

import argparse
import os
import shutil
import sys

from ..persistence.records import AOFError, apply_record, encoded_len, read_records


def check(path):
    """``(records, good_length, size, problem)``; problem None if good."""
    size = os.path.getsize(path)
    records = 0
    try:
        for argv, end in read_records(path):
            if argv is None:
                if end < size:
                    return records, end, size, "truncated record at the end (%d bytes)" % (size - end)
                return records, end, size, None
            problem = apply_record(None, argv)
            if problem:
                return records, _start_of(argv, end), size, problem
            records += 1
    except AOFError as e:
        return records, e.offset or 0, size, str(e)
    return records, size, size, None


def _start_of(argv, end):
    return end - encoded_len(argv)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m disque.tools.check_aof", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fix", action="store_true", help="truncate the file after its last good record")
    ap.add_argument("file")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.file):
        print("no such file: %s" % args.file, file=sys.stderr)
        return 2
    records, good, size, problem = check(args.file)
    if problem is None:
        print("AOF is valid: %d records, %d bytes" % (records, size))
        return 0
    print("AOF is damaged: %d good records, the last one ends at offset %d of %d: %s"
          % (records, good, size, problem))
    if not args.fix:
        print("run again with --fix to truncate it at offset %d (%d bytes lost)" % (good, size - good))
        return 1
    shutil.copyfile(args.file, args.file + ".bak")
    with open(args.file, "r+b") as f:
        f.truncate(good)
    print("fixed: truncated to %d bytes (a copy of the original is in %s.bak)" % (good, args.file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
