"""``timeout``: close client connections idle for more than that many
seconds (0, the default: never).

As in the original, a client is idle since its last request or reply, and a
client that waits on the node is never idle: one parked in GETJOB (its own
TIMEOUT applies), one whose ADDJOB waits for its copies, one whose requests
wait for CLIENT PAUSE to end, and a MONITOR (a listener by design).  The
check runs once a second while ``timeout`` is set, and not at all while it
is 0; CONFIG SET timeout starts or stops it at once.
"""

from twisted.application.service import Service
from twisted.internet import task

from .logs import logger

log = logger("disque.clients")

CHECK_INTERVAL = 1.0  # seconds; the directive counts whole seconds


class IdleClients(Service):
    """Closes the idle clients of one node runtime
    (:class:`disque.node.service.NodeRuntime`) while the service runs."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.timeout = 0
        self._loop = task.LoopingCall(self.check)
        self._loop.clock = runtime.reactor
        self._forget = None

    def startService(self):
        super().startService()
        self._forget = self.runtime.config.on_change("timeout", self.set_timeout)

    def stopService(self):
        if self._forget is not None:
            self._forget()
            self._forget = None
        self.set_timeout(0)
        return super().stopService()

    def set_timeout(self, seconds: int) -> None:
        self.timeout = seconds
        if seconds and not self._loop.running:
            self._loop.start(CHECK_INTERVAL, now=False)
        elif not seconds and self._loop.running:
            self._loop.stop()

    def check(self) -> int:
        """Close every client idle for more than ``timeout`` seconds; return
        how many."""
        runtime = self.runtime
        runtime.set_time()
        now = runtime.node.now // 1000
        closed = 0
        for client in list(runtime.ctx.clients.values()):
            if now - client.atime > self.timeout and not client.monitor and client.conn.idle():
                log.debug("Closing idle client {addr} (idle {seconds} s)", addr=client.addr.decode(),
                          seconds=now - client.atime)
                client.conn.close()
                closed += 1
        return closed
