"""The gRPC face of the coordinator: servicer, authentication, device tokens, limits, monitoring."""
