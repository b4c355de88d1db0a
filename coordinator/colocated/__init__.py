"""Devices on the coordinator's own host: vectors handed over as files, read ahead of the fold."""
