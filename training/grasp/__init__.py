"""GraSP-VL: a rotation whose prefix lengths carry semantic granularity
(docs/explanation/granularity.md#the-method)."""
