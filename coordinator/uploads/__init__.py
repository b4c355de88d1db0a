"""Taking an update: admission, upload slots, the upload stream into the spool, group commit of arrivals."""
