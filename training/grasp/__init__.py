"""GraSP-VL: a rotation whose prefix lengths carry semantic granularity
(docs/concepts/granularity.md#the-method)."""
