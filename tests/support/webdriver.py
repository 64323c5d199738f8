"""A small W3C WebDriver client for Debian's chromium and chromedriver,
with plain HTTP and JSON (urllib): no selenium, nothing to install.

    with ChromeDriver(workdir) as driver:
        browser = driver.session(width=1280, height=900)
        browser.get("http://127.0.0.1:%d/" % port)
        browser.click("tr[data-queue=orders] button[data-state=out]")
        browser.screenshot("page.png")

Every process started here is stopped by :meth:`ChromeDriver.stop`: the
sessions are deleted (chromedriver closes its browser), then chromedriver
is terminated, then any browser process still running with one of our
profile directories on its command line is killed by its PID (its helper
processes follow it).  chromedriver also gets PR_SET_PDEATHSIG, so it dies
with the test process; a browser outlives a test process killed with
SIGKILL, as nothing of the test runs then to stop it.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from tests.support.process import _die_with_parent, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C element reference key

BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--force-color-profile=srgb"]


def available():
    """The reason the browser tests cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return "%s is missing: apt-get install chromium chromium-driver (.ci/run does it)" % path
    return None


#: How many times a command on an element found by selector is tried when
#: the page keeps replacing that element.
STALE_RETRIES = 5


class WebDriverError(Exception):
    def __init__(self, status, error, message):
        super().__init__("%s (HTTP %s): %s" % (error, status, message))
        self.error = error


def _request(url, method="GET", payload=None, timeout=60.0):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json; charset=utf-8"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read() or b"{}")
        value = body.get("value") or {}
        raise WebDriverError(e.code, value.get("error"), value.get("message", "")[:2000]) from None
    return body.get("value")


class ChromeDriver:
    """One chromedriver process on a free loopback port."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.sessions = []
        self.profiles = []
        self.log_path = os.path.join(self.workdir, "chromedriver.log")
        self.proc = None

    def start(self, timeout=20.0):
        self.proc = subprocess.Popen(
            [CHROMEDRIVER, "--port=%d" % self.port, "--allowed-ips=127.0.0.1", "--log-path=" + self.log_path],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("chromedriver exited with %s" % self.proc.returncode)
            try:
                if (_request(self.url + "/status", timeout=2) or {}).get("ready"):
                    return self
            except (OSError, ValueError, WebDriverError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("chromedriver not ready on port %d" % self.port)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def session(self, width=1280, height=900, mobile=None):
        """A new browser with a fresh profile.  ``mobile``: a device pixel
        ratio, to emulate a phone (touch, ``width`` x ``height`` CSS pixels)."""
        profile = tempfile.mkdtemp(prefix="chromium-", dir=self.workdir)
        self.profiles.append(profile)
        options = {"binary": CHROMIUM,
                   "args": BROWSER_ARGS + ["--user-data-dir=" + profile, "--window-size=%d,%d" % (width, height)]}
        if mobile:
            options["mobileEmulation"] = {"deviceMetrics": {"width": width, "height": height,
                                                            "pixelRatio": mobile, "touch": True}}
        value = _request(self.url + "/session", "POST", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options, "pageLoadStrategy": "normal"}}})
        session = Session(self, value["sessionId"])
        self.sessions.append(session)
        return session

    def stop(self):
        for session in self.sessions:
            session.quit()
        self.sessions = []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self._browser_pids():  # what a crashed or killed chromedriver left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for profile in self.profiles:
            shutil.rmtree(profile, ignore_errors=True)
        self.profiles = []

    def _browser_pids(self):
        """PIDs of the processes holding one of our profile directories on
        their command line (the browsers started for our sessions)."""
        marks = [("--user-data-dir=" + p).encode() for p in self.profiles]
        pids = []
        if not marks:
            return pids
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if any(mark in args for mark in marks):
                pids.append(int(entry))
        return pids


class Session:
    """One browser session: W3C WebDriver commands."""

    def __init__(self, driver, session_id):
        self.driver = driver
        self.id = session_id
        self.base = "%s/session/%s" % (driver.url, session_id)
        self.closed = False

    def call(self, method, path, payload=None, timeout=60.0):
        if method == "POST" and payload is None:
            payload = {}
        return _request(self.base + path, method, payload, timeout)

    def quit(self):
        if self.closed:
            return
        self.closed = True
        try:
            _request(self.base, "DELETE", timeout=20)
        except (OSError, WebDriverError, ValueError):
            pass

    # -- navigation and scripts ------------------------------------------------

    def get(self, url):
        self.call("POST", "/url", {"url": url})

    def title(self):
        return self.call("GET", "/title")

    def js(self, script, *args):
        """The value of ``script`` (a function body: ``return ...``)."""
        return self.call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def cdp(self, cmd, params=None):
        """A Chrome DevTools Protocol command on the current tab."""
        return self.call("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params or {}})

    def authorize(self, header):
        """Send ``Authorization: header`` with every request of this tab
        from now on (navigation, and the page's fetch calls)."""
        self.cdp("Network.enable")
        self.cdp("Network.setExtraHTTPHeaders", {"headers": {"Authorization": header}})

    def wait(self, script, *args, timeout=10.0, what=None):
        """Poll ``script`` until it returns a true value (returned)."""
        deadline = time.time() + timeout
        value = None
        while time.time() < deadline:
            value = self.js(script, *args)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout, what or script, value))

    # -- elements ----------------------------------------------------------------

    def find(self, css):
        value = self.call("POST", "/element", {"using": "css selector", "value": css})
        return Element(value[ELEMENT])

    def find_all(self, css):
        return [Element(v[ELEMENT]) for v in self.call("POST", "/elements", {"using": "css selector", "value": css})]

    def click(self, css_or_element):
        self._on_element(css_or_element, "POST", "/click")

    def text(self, css_or_element):
        return self._on_element(css_or_element, "GET", "/text")

    def attribute(self, css_or_element, name):
        return self._on_element(css_or_element, "GET", "/attribute/%s" % name)

    def enabled(self, css_or_element):
        return self._on_element(css_or_element, "GET", "/enabled")

    def type(self, css_or_element, text):
        self._on_element(css_or_element, "POST", "/value", {"text": text})

    def _on_element(self, css_or_element, method, path, payload=None):
        """One element command. Given a CSS selector, it is found afresh
        when the page replaced the element between the find and the
        command (the dashboard redraws its tables on every refresh): the
        selector names whatever element matches now. An Element given by
        reference is not looked up again, so a stale one still fails."""
        if isinstance(css_or_element, Element):
            return self.call(method, "/element/%s%s" % (css_or_element, path), payload)
        for attempt in range(STALE_RETRIES):
            element = self.find(css_or_element)
            try:
                return self.call(method, "/element/%s%s" % (element, path), payload)
            except WebDriverError as e:
                if e.error != "stale element reference" or attempt == STALE_RETRIES - 1:
                    raise

    # -- pictures ---------------------------------------------------------------

    def screenshot(self, path, full_page=False):
        """Save a PNG of the viewport (``full_page``: of the whole page)."""
        if full_page:
            data = self.cdp("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        else:
            data = self.call("GET", "/screenshot")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path


class Element(str):
    """A WebDriver element reference (a CSS selector is a plain str)."""
