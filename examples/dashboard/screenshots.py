"""The dashboard's pictures in docs/img/, taken from the demo cluster.

    python examples/dashboard/screenshots.py [--warmup 210] [--out docs/img]

Starts the demo (demo.py) on free ports and opens its first node's page
in Debian's headless Chromium (through tests/support/webdriver.py), lets it run
``warmup`` seconds so the charts have history, then takes the pictures:
the whole page at 1280 px (dashboard.png), a phone's screen at 390 x 844
(dashboard-phone.png), and the view of one queue (dashboard-queue.png).
"""

import argparse
import base64
import os
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

from tests.support import webdriver  # noqa: E402
from demo import NODES, Demo, port_free  # noqa: E402


def free_base():
    """A port whose demo ports (3 RESP, 3 HTTP, 3 bus) are all free."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + 10000 + NODES > 65535:
            continue
        ports = [base + d + i for d in (0, 1000, 10000) for i in range(NODES)]
        if all(port_free(p) for p in ports):
            return base
    raise RuntimeError("no free ports")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=float, default=210)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    args = parser.parse_args()
    reason = webdriver.available()
    if reason:
        raise SystemExit(reason)
    os.makedirs(args.out, exist_ok=True)
    demo = Demo(free_base()).start()
    auth = "Basic " + base64.b64encode(("operator:" + demo.password).encode()).decode()
    work = tempfile.mkdtemp(prefix="disque-shots-")
    try:
        print("demo running at %s; %d s of warm-up" % (demo.urls[0], args.warmup))
        with webdriver.ChromeDriver(work) as driver:
            # The browsers start first: starting them takes the CPU for a
            # moment, which would show as a dip at the end of the charts.
            desktop = driver.session(1280, 900)
            desktop.authorize(auth)
            desktop.get(demo.urls[0])
            phone = driver.session(390, 844, mobile=2)
            phone.authorize(auth)
            phone.get(demo.urls[0])
            time.sleep(args.warmup)
            desktop.wait("return document.querySelectorAll('#nodes tr[data-up=\"1\"]').length === 3 && "
                         "document.querySelectorAll('#queue-table tr[data-queue]').length >= 5", timeout=20)
            print(desktop.screenshot(os.path.join(args.out, "dashboard.png"), full_page=True))
            phone.wait("return document.querySelectorAll('#queue-table tr[data-queue]').length >= 5", timeout=20)
            print(phone.screenshot(os.path.join(args.out, "dashboard-phone.png")))

            desktop.click('#queue-table tr[data-queue="thumbnails"] a.qlink')
            desktop.wait("return document.querySelectorAll('#job-table tr[data-job]').length > 5", timeout=20)
            time.sleep(2)
            print(desktop.screenshot(os.path.join(args.out, "dashboard-queue.png")))
    finally:
        demo.stop()


if __name__ == "__main__":
    main()
