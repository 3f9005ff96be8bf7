"""Python code generated from proto/ by `python -m service.proto_codegen` (do not edit)."""
