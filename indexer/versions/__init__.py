"""A bundle directory's versions: staging, the atomic release, publishing, what replicas follow."""
