"""The device's side of secure aggregation, phase by phase, and its batching on a shared transport."""
