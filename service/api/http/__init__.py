"""The HTTP/JSON API (the gRPC servicer behind Starlette routes), its OpenAPI document, and
the uvicorn endpoint that serves it."""
