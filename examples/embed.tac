# Run with:  twistd -ny examples/embed.tac
#
# Embeds a Disque node in an ordinary Twisted application: the node is a
# MultiService like any other, configured from code instead of a file.
from twisted.application import service

from disque.config import Config
from disque.node.service import DisqueNodeService

config = Config.defaults()
config.apply_overrides({"port": "7711", "bind": "127.0.0.1"})

application = service.Application("disque-embedded")
node = DisqueNodeService(config)
node.setServiceParent(application)
