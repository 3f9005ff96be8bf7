"""GraSP-VL: a rotation whose prefix lengths carry semantic granularity (design.md)."""
