"""How settings are declared (one flag and one doc row per key), read from TOML and spelled as spec strings."""
