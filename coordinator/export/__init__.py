"""Per-round inference export: the pruned ONNX model and its record, in the background."""
