"""The worker (docs/client.md, "Workers"), beside the clients it runs on.

* ``service``: :class:`Worker`, a Twisted service running a handler for
  every job of some queues, and :class:`StopInOrder`.
* ``tap``: ``twistd disque-worker``.

``from disque.worker import Worker, StopInOrder`` is the public way in;
importing this package imports neither Twisted nor txredisapi until one of
them is used (PEP 562), as ``disque.client`` does.
"""

__all__ = ["StopInOrder", "Worker"]


def __getattr__(name):
    if name in __all__:
        from . import service
        return getattr(service, name)
    raise AttributeError(name)
