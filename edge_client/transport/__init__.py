"""The device's channel to the coordinator: one typed method per RPC, TLS, retries with backoff."""
