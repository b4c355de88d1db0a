"""Generated protobuf and gRPC stubs of `protos/fedort_v1.proto` (`python -m fedort.protos.generate`); do not edit."""
