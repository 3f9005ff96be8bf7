"""Checking a version before it is served: the faults a check reports, and the checks."""
