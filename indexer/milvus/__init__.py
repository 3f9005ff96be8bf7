"""A bundle version in Milvus: the collection, the export, the alias."""
