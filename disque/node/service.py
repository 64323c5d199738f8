"""DisqueNodeService: a Disque node as a Twisted ``MultiService``, the
embedding API::

    from disque.config import Config
    from disque.node.service import DisqueNodeService
    DisqueNodeService(Config.defaults()).setServiceParent(application)

Assembly, start and stop: it makes the strategies, the TLS contexts, the
listeners (``StreamServerEndpointService``s from the endpoint strings of
``disque.node.listeners``), the runtime (``disque.node.runtime``), the
background load (``disque.node.loading``) and the timers
(``disque.node.timers``), and starts and stops them in order.  The work
itself is the runtime's.
"""

import os

from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred, DeferredList, maybeDeferred

from .. import DISQUE_VERSION
from ..io import files
from ..bus.links import BUS_PORT_OFFSET, Links
from ..bus.protocol import BusServerFactory
from ..config import ConfigSetError
from ..io.files import remove_stale_temps
from ..interfaces import IFederationPolicyFactory, IHTTPFrontendFactory, IPersistenceFactory
from ..io.logs import logger, node_log
from ..http import site_url
from ..plugins import make_strategy, split_spec
from ..resp.protocol import RespFactory
from .heap import frozen_cycles_released, heap_freezer
from .listeners import (BusConnector, DeferredEndpoint, EndpointError, Listener, bus_descriptions,
                        client_descriptions, listening_port, open_bus_refusal, server_endpoint, tls_descriptions)
from .loading import BackgroundLoad
from .nodefile import check_writable, load_nodes_file
from .nodefile_lock import NodeFileLock
from .runtime import NodeRuntime
from .timers import IdleClients, Watchdog, hz_timer
from .tls import RELOADABLE, TLSContexts, TLSError, TLSServerEndpoint, enabled as tls_enabled

log = logger("disque")

#: Seconds a stopping node (SIGTERM, SHUTDOWN, ``stopService``) waits for
#: its listeners and links to close before it stops anyway, logging what
#: it did not wait for.  A link closes within ``CLOSE_GRACE`` seconds
#: (disque.bus.links: aborted if its peer does not answer), so this bounds
#: what nothing else does.
STOP_TIMEOUT = 5.0


def _describe(child):
    """A child service, for the log."""
    description = getattr(child, "description", None)
    return "the listener on %s" % description if description else type(child).__name__


def _within(clock, seconds, waits):
    """A Deferred that fires (None) once each Deferred of ``waits``
    (``(what, Deferred)`` pairs) has fired, or after ``seconds``: then
    those still waited for are logged and left.  A failure is logged."""
    done = Deferred()

    def give_up():
        left = [what for what, d in waits if not d.called]
        log.warn("Stopped waiting after {seconds:g} s for {left}: stopping anyway", seconds=seconds,
                 left=", ".join(left))
        done.callback(None)

    def failed(failure, what):
        log.failure("Stopping {what} failed", failure, what=what)

    for what, d in waits:
        d.addErrback(failed, what)
    timer = clock.callLater(seconds, give_up)

    def finished(_):
        if timer.active():
            timer.cancel()
            done.callback(None)

    DeferredList([d for _, d in waits]).addCallback(finished)
    return done


class DisqueNodeService(MultiService):
    """A Disque node.  ``config`` is a :class:`disque.config.Config`.

    Building it makes the strategies (``persistence``,
    ``federation-policy``), parses the endpoint strings and loads the node
    file and the AOF; a bad strategy, endpoint string, node file or AOF
    raises then (``StrategyError``, ``EndpointError``, ``NodeFileError``,
    ``LoadError``), before anything listens.  Starting it starts its
    children in order: the client listeners (the first one's port is the
    port the node advertises), the bus listeners, the periodic tick (whose
    first run, at once, opens the links to the peers of the node file) and
    the heap freezer.

    An AOF too big to load at once (``IPersistence.begin_load``) loads
    after the service starts, a slice of ``LOAD_SLICE`` seconds per reactor
    turn, as the original loads with its event loop running: the client
    and HTTP listeners serve at once, clients get ``-LOADING`` but for
    INFO, COMMAND, AUTH, SHUTDOWN and LATENCY (the original's ``loading``
    commands), INFO shows the progress; the bus listeners are bound but
    close peers' connections, and the tick (the links, the cluster's
    cron, the jobs' timers) starts only with the state loaded.  :meth:`when_loaded` tells when; a file found unusable
    half way logs the error and stops the node (``on_shutdown``)."""

    name = "disque"

    def __init__(self, config, reactor=None, on_shutdown=None, node_id=None):
        super().__init__()
        self.nodes_lock = None
        try:
            self._build(config, reactor, on_shutdown, node_id)
        except BaseException:  # (a node built again in this process must find the node file free)
            if self.nodes_lock is not None:
                self.nodes_lock.release()
            raise

    def _build(self, config, reactor, on_shutdown, node_id):
        if reactor is None:
            from twisted.internet import reactor
        self.config = config
        self.reactor = reactor
        self._on_shutdown = on_shutdown or self._stop_reactor
        self._forget = node_log.follow(config)  # first: what follows may log
        node_log.set_tag_fields(port=(config["tls-port"] if config["tls-cluster"] else config["port"]) or None)
        self.persistence = make_strategy(IPersistenceFactory, config["persistence"], config)
        self.persistence.reactor = reactor  # everysec fsyncs and incremental rewrites
        federation = make_strategy(IFederationPolicyFactory, config["federation-policy"], config)
        http_frontend = (make_strategy(IHTTPFrontendFactory, config["http-frontend"], config)
                         if config["http-port"] else None)
        self.tls = TLSContexts(config) if tls_enabled(config) else None  # reads the files: TLSError
        tls_cluster = config["tls-cluster"]
        self.connector = BusConnector(reactor, config, self.tls.client() if tls_cluster else None)
        # (endpoint, description, the directive that put it there: a listener that cannot listen names it)
        plain = "listen" if config["listen"] else "port"
        client_endpoints = [(server_endpoint(reactor, "listen", d), d, plain) for d in client_descriptions(config)]
        tls_endpoints = [(TLSServerEndpoint(server_endpoint(reactor, "tls-port", d), self.tls.server("clients")),
                          d + " (TLS)", "tls-port") for d in tls_descriptions(config)]
        # The first client listener's port is the one the node advertises.
        client_endpoints = tls_endpoints + client_endpoints if tls_cluster else client_endpoints + tls_endpoints
        bus_endpoints = [(server_endpoint(reactor, "cluster-listen", d), d, "cluster-listen")
                         for d in config["cluster-listen"]]
        self._forget.append(config.on_change("cluster-password", self._closed_bus))  # before anything loads
        nodes_path = os.path.join(config["dir"], config["cluster-config-file"])
        # One node per node file (and so per dir): locked before it is read
        # or a stale temp of it removed; held until the service stops.
        self.nodes_lock = NodeFileLock(nodes_path)
        for path in remove_stale_temps(files.OS, nodes_path):
            log.info("Removed {path}, left by a save the node did not finish", path=path)
        saved = load_nodes_file(nodes_path) if node_id is None else None
        check_writable(nodes_path)  # a directory the node cannot write stops start-up: NodeFileError
        if saved is not None:
            node_id = saved[0]
        runtime = self.runtime = NodeRuntime(config, reactor, self.persistence, self._on_shutdown, node_id, nodes_path)
        node_log.set_tag_fields(id=runtime.node.my_id.decode())
        if saved is not None:
            runtime.node.cluster.restore(saved[1], saved[2], runtime.node.now)
        else:
            runtime.node.cluster.dirty = True  # a new node: write its ID down
        # Jobs from the AOF before anything listens (a bad file stops start-up
        # here, where twistd's option handling reports it in one line), or
        # a big file's load, run in slices once the service starts.
        self.load = BackgroundLoad(self.persistence.begin_load(runtime.node), runtime, self._loaded,
                                   self._on_shutdown)
        if not self.load.active:
            self._log_loaded()
        runtime.node.federation.policy = federation
        self._forget.append(config.on_change("appendonly", self._set_appendonly))
        if self.tls is not None:
            for name in RELOADABLE:
                self._forget.append(config.on_change(name, self._tls_reloader()))

        clients = RespFactory(runtime)
        self.listeners = [Listener(endpoint, clients, d, directive) for endpoint, d, directive in client_endpoints]
        bus = BusServerFactory(runtime.bus)
        if not bus_endpoints:  # derived: beside the client port, known once it listens
            advertised = "tls-port" if tls_cluster else plain
            directive = "%s (the cluster bus, at %s + 10000)" % (advertised, advertised)
            bus_endpoints = [(DeferredEndpoint(reactor, "cluster-listen", lambda i=i: self._bus_description(i)),
                              "tcp:<client port + 10000>", directive) for i in range(len(bus_descriptions(config, 0)))]
        if tls_cluster:  # mutual TLS: no byte of a peer without the CA's certificate reaches BusProtocol
            bus_endpoints = [(TLSServerEndpoint(endpoint, self.tls.server("bus-server")), d + " (TLS)", directive)
                             for endpoint, d, directive in bus_endpoints]
        self.bus_listeners = [Listener(endpoint, bus, d, directive) for endpoint, d, directive in bus_endpoints]
        self.http_listener = None
        if http_frontend is not None:  # the HTTP side (disque/http/): off while http-port is 0
            from twisted.internet.endpoints import quoteStringArgument

            from ..http.access import AccessSite

            description = "tcp:%d:interface=%s" % (config["http-port"], quoteStringArgument(config["http-bind"]))
            site = AccessSite(http_frontend.resource(self), runtime)
            endpoint = server_endpoint(reactor, "http-port", description)
            if config["http-tls"]:
                endpoint = TLSServerEndpoint(endpoint, self.tls.server("http"))
            self.http_listener = Listener(endpoint, site, description + (" (HTTPS)" if config["http-tls"] else
                                                                         " (HTTP)"), "http-port")
        for listener in self.listeners + self.bus_listeners + ([self.http_listener] if self.http_listener else []):
            listener.setServiceParent(self)
        self.cron = hz_timer(config, reactor, self._cron_tick)
        if not self.load.active:  # (else the tick waits for the jobs: _loaded)
            self.cron.setServiceParent(self)
        freezer = heap_freezer(reactor, config["gc-freeze-interval"])
        if freezer is not None:  # (while loading too: what each second loaded is frozen, so the
            freezer.setServiceParent(self)  # collector's full collections do not walk it again and again)
        IdleClients(runtime).setServiceParent(self)
        Watchdog(config, reactor).setServiceParent(self)

    def _log_loaded(self):
        if len(self.runtime.node.jobs):
            log.info("DB loaded from append only file: {n} jobs", n=len(self.runtime.node.jobs))

    # -- loading the AOF in the background (disque.node.loading) ------------------

    @property
    def loading(self):
        """True while the AOF loads in the background."""
        return self.load.active

    def when_loaded(self):
        """A Deferred that fires (None) once the node has its state and
        serves every command, or fails with the ``LoadError`` that stopped
        the load; it never fires if the service stops first."""
        return self.load.when_loaded()

    def _loaded(self):
        """The state is back: start what waited."""
        runtime = self.runtime
        self._log_loaded()
        self.cron.setServiceParent(self)  # started at once: the first tick runs now (the links, the cron)
        runtime.after_batch()  # the jobs' timers
        self._log_ready()

    def _bus_description(self, index):
        if self.listening_port is None:
            raise EndpointError("cluster-listen: the cluster bus listens on the client port + 10000, and no "
                                "client listener has a port: set cluster-listen")
        return bus_descriptions(self.config, self.listening_port)[index]

    def _closed_bus(self, password):
        """``cluster-password``, at start-up and at each CONFIG SET: a bus
        reachable beyond loopback is not left open (listeners.open_bus_refusal)."""
        refusal = open_bus_refusal(self.config, password)
        if refusal is not None:
            raise ConfigSetError(refusal.encode())

    def _tls_reloader(self):
        """An applier that rebuilds the TLS contexts at CONFIG SET (not at
        registration: they were just built).  A set that leaves them
        unusable (a missing file, a key of another certificate) is refused
        and the old ones stay."""
        registered = []

        def reload(value):
            if not registered:
                registered.append(True)
                return
            try:
                self.tls.reload()
            except TLSError as e:
                raise ConfigSetError(b"Unable to update TLS configuration: " + str(e).encode()) from None
            log.info("TLS certificates reloaded: new connections use them")
        return reload

    def _set_appendonly(self, enabled):
        node = self.runtime.node
        self.persistence.set_enabled(bool(enabled), node)
        if enabled and not self.persistence.enabled:
            raise ConfigSetError(b"Unable to turn on AOF: this node keeps no file (persistence %s)"
                                 % self.config["persistence"].partition(":")[0].encode())
        # (Not while the AOF loads: the records it applies are not written back.)
        node.persist = self.persistence.enabled and not self.load.active

    def _stop_reactor(self):
        from twisted.internet.error import ReactorNotRunning

        if self.reactor.running:
            try:
                self.reactor.stop()
            except ReactorNotRunning:  # stopping already (a signal came first)
                pass

    @property
    def node(self):
        return self.runtime.node

    @property
    def listening_port(self):
        """The port the node advertises: the first client listener's, once
        it listens."""
        for listener in self.listeners:
            port = listening_port(listener)
            if port is not None:
                return port
        return None

    def startService(self):
        self.nodes_lock.write_pid()  # (twistd forks to run in the background after building the service)
        runtime = self.runtime
        runtime.set_time()
        if not self.load.active:  # (else once loaded: no record is written back meanwhile)
            runtime.node.persist = self.persistence.enabled
        runtime.links = Links(self.reactor, runtime.bus, self.connector, frozen_cycles_released)
        # The listeners before the other children (under twistd they listen
        # already, from privilegedStartService): the first tick, which runs
        # as the tick's TimerService starts, writes the node file and opens
        # the links, so the port the node advertises must be known by then.
        # Starting a listener twice is harmless: it listens once.
        for listener in self.listeners + self.bus_listeners:
            listener.startService()
        port = self.listening_port
        runtime.node.cluster.myself.port = self.config["port"] if port is None else port
        node_log.set_tag_fields(port=runtime.node.cluster.myself.port)
        bus_ports = [listening_port(listener) for listener in self.bus_listeners]
        if port is not None and port + BUS_PORT_OFFSET not in bus_ports:
            log.warn("No cluster-listen endpoint listens on port {bus} (client port {port} + 10000): "
                     "peers will not reach this node's bus", bus=port + BUS_PORT_OFFSET, port=port)
        super().startService()
        if self.load.active:
            log.info("Disque {version} node {id} loading the AOF; meanwhile clients on {where} get -LOADING{http}",
                     version=DISQUE_VERSION, id=runtime.node.my_id.decode(), where=self._where(),
                     http=self._http_where())
            self.load.start()
            return
        self._log_ready()

    def _log_ready(self):
        log.info("Disque {version} node {id} ready to accept connections on {where}{http}",
                 version=DISQUE_VERSION, id=self.runtime.node.my_id.decode(), where=self._where(),
                 http=self._http_where())

    def _where(self):
        """Where clients connect, for the log."""
        port = self.listening_port
        where = "port %d" % port if port is not None else ", ".join(l.description for l in self.listeners)
        tls_port = self.config["tls-port"]
        if tls_port:
            where += " (TLS)" if tls_port == port else ", TLS port %d" % tls_port
        return where

    def _http_where(self):
        """For the log: "; dashboard at <its URL>" while the HTTP side is
        on (the name of another frontend), else ""."""
        if self.http_listener is None:
            return ""
        config = self.config
        url = site_url(config["http-bind"], listening_port(self.http_listener) or config["http-port"],
                       config["http-tls"])
        frontend = split_spec(config["http-frontend"])[0]
        return "; %s at %s" % ("dashboard" if frontend == "default" else "HTTP frontend " + frontend, url)

    def _cron_tick(self):
        """The periodic work, ``hz`` times a second (disque.node.timers)."""
        self.runtime.tick()

    def stopService(self):
        """Stop the node: a Deferred that fires once its children (the
        timers, then the listeners) and its links have stopped, or after
        ``STOP_TIMEOUT`` seconds whatever is left (logged): under twistd
        the process then exits."""
        for forget in self._forget:
            forget()
        self._forget = []
        self.load.cancel()  # (persistence.close() abandons the load)
        node_log.reset()
        self.runtime.effects.end_turn_now()  # what this turn kept leaves before the connections close
        Service.stopService(self)  # and each child as MultiService.stopService does, named for the log
        waits = [(_describe(child), maybeDeferred(child.stopService)) for child in reversed(list(self))]
        for client in list(self.runtime.ctx.clients.values()):
            client.conn.close()
        if self.runtime.links is not None:
            waits += self.runtime.links.stop_all()
            self.runtime.links = None
        self.persistence.close()
        self.nodes_lock.release()
        return _within(self.reactor, STOP_TIMEOUT, waits)
