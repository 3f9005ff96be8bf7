"""Generated code of the strata protos."""
