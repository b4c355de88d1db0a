"""Durable coordinator state: the SQLite store, the state-dir layout, its lock, integrity and disk-full checks."""
