"""The wheel as a user gets it: build it, install it in a fresh venv of each
runtime, start a node from it and talk to it.

    python tests/tools/smoke_wheel.py [--wheel W] [--python INTERP]... [--keep]

Without ``--wheel`` the running interpreter builds the sdist and the wheel
(``python -m build``: the wheel is built from the sdist, so a file the sdist
forgets fails here) and checks both with ``twine check --strict``; both
come with the ``release`` extra.  Then, for each ``--python`` (default: the
running one), in a temporary directory outside the checkout, so that the
checkout's ``disque/`` cannot be imported:

* a fresh venv, and ``pip install`` of the wheel, its dependencies from the
  package index as a user's would come (PyPy 3.9's pins included);
* ``disque`` is imported from the venv, with the dashboard's static files;
* ``twistd --help`` lists the plugin, ``twistd disque --version`` names the
  wheel's version;
* ``twistd -n disque`` on a free loopback port answers ``redis-cli``: PING,
  ADDJOB, GETJOB, ACKJOB, and INFO's ``disque_version`` (the protocol's)
  and ``package_version`` (the wheel's); SIGTERM stops it.

The runtimes run side by side.  Prints one line per runtime; on a failure,
what failed and the output that tells why, and exits 1.  Only the standard
library: it runs from the checkout without importing anything of it.
.ci/run runs it for CPython and PyPy.
"""

import argparse
import glob
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTOCOL = "1.0-rc1"  # disque.DISQUE_VERSION, INFO's disque_version


class Failed(Exception):
    """A step failed: the message says which, ``details`` why."""

    def __init__(self, message, details=""):
        super().__init__(message)
        self.details = details[-4000:]  # the end of an output says why


def run(args, what, timeout=300, **kw):
    """Run ``args``; its stdout, or :class:`Failed` naming ``what``."""
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        raise Failed("%s: no answer within %d s" % (what, timeout), e.output or "")
    except OSError as e:
        raise Failed("%s: cannot run %s: %s" % (what, args[0], e))
    if p.returncode != 0:
        raise Failed("%s: exit status %d (%s)" % (what, p.returncode, " ".join(args)), p.stdout)
    return p.stdout


def clean_env():
    """The environment without what would let the checkout or another venv in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def build(outdir):
    """sdist and wheel into ``outdir``, checked by twine: the wheel's path."""
    for module in ("build", "twine"):
        if importlib.util.find_spec(module) is None:
            raise Failed("building the wheel needs %s: pip install -e '.[release]' (or pass --wheel)" % module)
    os.makedirs(outdir)
    run([sys.executable, "-m", "build", "--outdir", outdir, ROOT], "python -m build", cwd=outdir)
    made = sorted(glob.glob(os.path.join(outdir, "*")))
    run([sys.executable, "-m", "twine", "check", "--strict"] + made, "twine check")
    wheels = [f for f in made if f.endswith(".whl")]
    if len(wheels) != 1 or not any(f.endswith(".tar.gz") for f in made):
        raise Failed("python -m build made %s, not one wheel and one sdist" % [os.path.basename(f) for f in made])
    return wheels[0]


def missing_from(wheel, root=ROOT):
    """What the node needs and the wheel lacks: a module of the checkout's
    ``disque`` package, a file of the dashboard, the twistd plugin."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    needed = ["twisted/plugins/disque_plugin.py"]
    for folder, dirs, files in os.walk(os.path.join(root, "disque")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        needed += ["%s/%s" % (rel, f) for f in files if f.endswith(".py") or rel.endswith("/static")]
    return sorted(n for n in needed if n not in names)


def wheel_version(wheel):
    """disque-0.1.0-py3-none-any.whl -> 0.1.0"""
    return os.path.basename(wheel).split("-")[1]


def free_port():
    """A loopback port that is free, and so is its cluster bus port (+10000)."""
    for _ in range(200):
        port = random.randint(20000, 55000)
        socks = []
        try:
            for p in (port, port + 10000):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise Failed("no free loopback port pair (port, port + 10000) found")


class Node:
    """``twistd -n disque`` of the venv, on ``port``, in ``workdir``."""

    def __init__(self, venv, workdir, port, env):
        self.port, self.workdir, self.env = port, workdir, env
        self.log = os.path.join(workdir, "node.log")
        data = os.path.join(workdir, "data")
        os.mkdir(data)
        self.proc = subprocess.Popen(
            [os.path.join(venv, "bin", "twistd"), "-n", "--pidfile=", "--logfile=" + self.log, "disque",
             "--port", str(port), "--bind", "127.0.0.1", "--dir", data],
            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)

    def output(self):
        text = ""
        if self.proc.poll() is not None and self.proc.stdout:
            text += self.proc.stdout.read()
        if os.path.exists(self.log):
            with open(self.log) as f:
                text += f.read()
        return text[-4000:]

    def cli(self, *args):
        return run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port)] + list(args),
                   "redis-cli " + " ".join(args), timeout=20, env=self.env).strip()

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failed("twistd -n disque exited with status %d before answering PING" % self.proc.returncode,
                             self.output())
            p = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "PING"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=10)
            if p.stdout.strip() == "PONG":
                return
            time.sleep(0.1)
        raise Failed("twistd -n disque did not answer PING within %d s" % timeout, self.output())

    def stop(self, timeout=30):
        """SIGTERM; :class:`Failed` if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failed("twistd -n disque did not stop within %d s of SIGTERM" % timeout, self.output())
        if self.proc.stdout:
            self.proc.stdout.close()


def expect(condition, message, details=""):
    if not condition:
        raise Failed(message, details)


def smoke(interpreter, wheel, workdir):
    """Every check on one runtime; its name and timings, or :class:`Failed`."""
    env = clean_env()
    os.makedirs(workdir)
    venv = os.path.join(workdir, "venv")
    python = os.path.join(venv, "bin", "python")
    version = wheel_version(wheel)
    started = time.monotonic()
    run([interpreter, "-m", "venv", venv], "creating the venv", cwd=workdir, env=env)
    # --no-compile: only what the node imports is compiled, when it does
    run([python, "-m", "pip", "install", "-q", "--no-compile", wheel], "pip install of the wheel",
        cwd=workdir, env=env, timeout=600)
    installed = time.monotonic()

    where = run([python, "-c", "import os, platform, disque.http.dashboard as d; import disque; "
                 "print(platform.python_implementation(), platform.python_version()); print(disque.__version__); "
                 "print(os.path.dirname(disque.__file__)); print(' '.join(sorted(os.listdir(d.STATIC))))"],
                "importing disque from the venv", cwd=workdir, env=env).splitlines()
    name, package_version, package_dir, static = where[0], where[1], where[2], where[3].split()
    expect(os.path.realpath(package_dir).startswith(os.path.realpath(venv) + os.sep),
           "disque was imported from %s, not from the venv" % package_dir)
    expect(package_version == version,
           "disque.__version__ is %s, the wheel's name says %s" % (package_version, version))
    expect("index.html" in static and "app.js" in static,
           "the dashboard's static files are missing from the wheel: %s" % static)

    twistd = os.path.join(venv, "bin", "twistd")
    plugins = run([twistd, "--help"], "twistd --help", cwd=workdir, env=env)
    expect(any(line.split()[:1] == ["disque"] for line in plugins.splitlines()),
           "twistd --help does not list the disque plugin (twisted/plugins/disque_plugin.py missing?)", plugins)
    shown = run([twistd, "disque", "--version"], "twistd disque --version", cwd=workdir, env=env).strip()
    wanted = "disque %s (Disque protocol %s), Twisted " % (version, PROTOCOL)
    expect(shown.startswith(wanted), "twistd disque --version printed %r, expected it to start with %r"
           % (shown, wanted))

    node = Node(venv, workdir, free_port(), env)
    try:
        node.wait_ready()
        ready = time.monotonic()
        job = node.cli("ADDJOB", "smoke", "hello from the wheel", "0")
        expect(job.startswith("D-"), "ADDJOB answered %r, not a job ID" % job, node.output())
        got = node.cli("GETJOB", "TIMEOUT", "5000", "FROM", "smoke").splitlines()
        expect(got == ["smoke", job, "hello from the wheel"], "GETJOB answered %r, expected the job back" % got,
               node.output())
        acked = node.cli("ACKJOB", job)
        expect(acked == "1", "ACKJOB answered %r, expected 1" % acked)
        info = node.cli("INFO", "server").splitlines()
        for field in ("disque_version:" + PROTOCOL, "package_version:" + version):
            expect(field in info, "INFO server has no %r" % field, "\n".join(info))
    except Failed as e:
        if not e.details:
            e.details = node.output()
        node.stop()
        raise
    node.stop()
    return "%s: ok (venv and install %.1f s, node up %.1f s, all %.1f s)" % (
        name, installed - started, ready - installed, time.monotonic() - started)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", help="the wheel to check (default: build it, and its sdist, and check both)")
    parser.add_argument("--python", action="append", dest="pythons", metavar="INTERP",
                        help="an interpreter to make a venv with (repeatable; default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its path is printed)")
    args = parser.parse_args(argv)
    if shutil.which("redis-cli") is None:
        print("smoke-wheel: FAIL: redis-cli is not installed (Debian: redis-tools)")
        return 1
    top = tempfile.mkdtemp(prefix="disque-smoke-wheel-")
    started = time.monotonic()
    try:
        try:
            wheel = os.path.abspath(args.wheel) if args.wheel else build(os.path.join(top, "dist"))
        except Failed as e:
            print("smoke-wheel: FAIL: %s\n%s" % (e, e.details.rstrip()))
            return 1
        missing = missing_from(wheel)
        if missing:
            print("smoke-wheel: FAIL: %s lacks %d files the node needs: %s"
                  % (os.path.basename(wheel), len(missing), " ".join(missing[:20])))
            return 1
        print("smoke-wheel: %s (%s)" % (os.path.basename(wheel), "given" if args.wheel else
                                          "built with its sdist, twine check passed, %.1f s"
                                          % (time.monotonic() - started)))
        pythons = args.pythons or [sys.executable]
        results = [None] * len(pythons)

        def one(i, interpreter):
            try:
                results[i] = (True, smoke(interpreter, wheel, os.path.join(top, "runtime-%d" % i)))
            except Failed as e:
                results[i] = (False, "%s: %s\n%s" % (interpreter, e, e.details.rstrip()))
            except Exception as e:  # noqa: BLE001 - reported as this runtime's failure
                results[i] = (False, "%s: %s: %s" % (interpreter, type(e).__name__, e))

        threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(pythons)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for ok, text in results:
            print("smoke-wheel: " + text if ok else "smoke-wheel: FAIL on " + text)
        failed = sum(1 for ok, _ in results if not ok)
        print("smoke-wheel: %d of %d runtimes ok in %.1f s" % (len(results) - failed, len(results),
                                                               time.monotonic() - started))
        return 1 if failed else 0
    finally:
        if args.keep:
            print("smoke-wheel: kept %s" % top)
        else:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
