"""The search engine over one bundle version: plans and the funnel, concept and metadata
filters, grouping, hits, Explain and its descriptions, the concept catalog, and the scorers
that find rows (local FAISS files, or a Milvus collection)."""
