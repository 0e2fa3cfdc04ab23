"""The Policy service as a client sees it: clients, typed errors, tensors and the identity digest."""
