# Run with:  twistd -ny examples/client/node_and_worker.tac
#
# One Twisted application holding a Disque node and a worker consuming its
# "orders" queue: the node is a service, the worker is a service, and
# twistd starts and stops both.  StopInOrder stops the worker first and the
# node once the worker is done (its running jobs acknowledged).
import os
import sys

from twisted.application import service

from disque.config import Config
from disque.node.service import DisqueNodeService
from disque.worker import StopInOrder, Worker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # twistd sets __file__ for a .tac
from jobs import handle_order  # noqa: E402

PORT = int(os.environ.get("DISQUE_PORT", "7711"))

config = Config.defaults()
config.apply_overrides({"port": str(PORT), "bind": "127.0.0.1"})

application = service.Application("disque-node-and-worker")
services = StopInOrder()
services.setServiceParent(application)
node = DisqueNodeService(config)
node.setServiceParent(services)
worker = Worker(handle_order, ["orders"], nodes=["127.0.0.1:%d" % PORT], concurrency=4)
worker.setServiceParent(services)
