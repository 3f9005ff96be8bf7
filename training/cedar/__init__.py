"""CEDAR: sparse, named, axis-aligned concepts by an exactly invertible rotation."""
