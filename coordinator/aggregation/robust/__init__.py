"""Robust combiners: coordinate-wise median, trimmed mean, Krum."""
