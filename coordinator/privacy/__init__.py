"""Differential privacy (DP-FedAvg, adaptive clipping, accounting) and secure aggregation."""
