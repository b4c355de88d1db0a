"""Data sets for simulations and how they are split: bundled digits, Synthetic(α, β), partitioners."""
