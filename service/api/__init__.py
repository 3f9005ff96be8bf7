"""The network surface: the gRPC services (api/grpc/), the HTTP/JSON API and page (api/http/),
and the server that runs both on one loop, servicer and engine."""
