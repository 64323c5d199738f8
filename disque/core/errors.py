"""The one error type of the core's command entry points."""


class CommandError(Exception):
    """A refusal the client sees as ``-<code> <message>`` (``code`` is the
    original's error prefix: ``ERR``, ``NOJOB``, ``NOREPL``, ``PAUSED``...)."""

    def __init__(self, code: bytes, message: bytes):
        super().__init__(code, message)
        self.code = code
        self.message = message
