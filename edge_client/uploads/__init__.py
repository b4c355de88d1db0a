"""How a trained update leaves the device: codecs and deltas, error feedback, local DP, co-located files."""
