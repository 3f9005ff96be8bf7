"""The Milvus engine: the scorer over an exported collection (scorer.py), AUTO's funnel
calibrated on it (calibration.py), the filter expressions it evaluates (expressions.py), and
the engine opened over a served alias (backend.py)."""
