"""Persistence providers (``IPersistence``): ``none`` and, later, ``aof``."""
