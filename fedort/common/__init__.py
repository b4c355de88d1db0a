"""What the device and the coordinator share: errors, durable files, client data, TOML, digests, secure-aggregation crypto."""
