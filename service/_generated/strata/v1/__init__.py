"""strata.v1: messages (search_pb2) and the SearchService stub and servicer (search_pb2_grpc)."""
