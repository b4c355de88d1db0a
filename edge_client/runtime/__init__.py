"""The device's federated loop: join, poll, train, upload, heartbeat, its cache and how a run ends."""
