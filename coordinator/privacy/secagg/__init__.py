"""The coordinator's side of secure aggregation: rounds, routing of keys and shares, the masked sum."""
