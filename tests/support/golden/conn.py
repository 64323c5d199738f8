"""A raw client connection of the replay: every byte kept, replies framed
with :func:`golden.resp.parse_reply`, and the silences and closes the
transcripts note ("nothing more within 0.5s", "connection closed by
server") observable."""

import select
import socket
import time

from .resp import Incomplete, encode_command, parse_reply

READ_TIMEOUT = 5.0  # seconds: a reply not complete by then is "no reply"


class Conn:
    """A raw socket to one node, keeping every byte it receives."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
        self.buf = b""
        self.eof = False
        host, lport = self.sock.getsockname()[:2]
        self.addr = b"%s:%d" % (host.encode(), lport)

    def send(self, data):
        if data:
            try:
                self.sock.sendall(data)
            except OSError:  # closed by the server: reading will say so
                self.eof = True

    def _recv(self, timeout):
        if self.eof:
            return False
        # poll, not select: a descriptor past FD_SETSIZE (1024) is fine
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        if not poller.poll(max(timeout, 0) * 1000):
            return False
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_replies(self, n, timeout=READ_TIMEOUT):
        """(raw, values, problem): problem is None, 'timeout', 'closed' or
        'malformed'."""
        deadline = time.monotonic() + timeout
        raw = b""
        values = []
        while len(values) < n:
            try:
                value, end = parse_reply(self.buf, 0)
                values.append(value)
                raw += self.buf[:end]
                self.buf = self.buf[end:]
                continue
            except Incomplete:
                pass
            except ValueError:
                return raw + self.buf, values, "malformed"
            if not self._recv(deadline - time.monotonic()):
                return raw + self.buf, values, "closed" if self.eof else "timeout"
        return raw, values, None

    def silence(self, seconds, keep=False):
        """Bytes that arrive within ``seconds`` (b"" expected); ``keep``
        leaves them to be read as replies."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._recv(deadline - time.monotonic()):
            pass
        extra = self.buf
        if not keep:
            self.buf = b""
        return extra

    def wait_closed(self, timeout=3.0):
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self._recv(deadline - time.monotonic())
        return self.eof

    def call(self, *argv):
        self.send(encode_command(list(argv)))
        raw, values, problem = self.read_replies(1)
        assert problem is None, (argv, raw, problem)
        return values[0]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
