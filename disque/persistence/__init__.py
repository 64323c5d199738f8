"""Persistence providers (``IPersistence``): ``aof`` (the default, idle
with ``appendonly no``) and ``none``."""
