"""RESP2 wire protocol: request parsing, reply encoding, the client protocol."""
