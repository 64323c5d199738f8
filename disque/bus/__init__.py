"""The cluster bus: wire format, protocol, links to peers."""
