"""The index layout measured: bytes a row, speed beside hnswlib, the funnel, shortlists, scale."""
