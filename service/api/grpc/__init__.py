"""strata.v1 over gRPC: the servicer, the admin service, the interceptors, the message
conversions both ends share, and the Python client."""
