"""`strata serve --workers N`: the parent that keeps the workers (parent.py), a worker's body
and its link to the parent (worker.py), and what the workers share by being forked from one
preloaded process (preload.py)."""
