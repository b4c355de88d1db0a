"""On-device training: the Lightning-style module and trainer, batches, FedProx, one task's local work."""
