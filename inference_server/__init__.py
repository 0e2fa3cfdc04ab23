"""The inference server: one verified checkpoint served over gRPC, sessions and batching across them."""
