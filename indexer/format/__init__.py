"""The bundle's on-disk format and its readers and writers: the bottom of the indexer.

Everything here reads or writes a version's files, and imports nothing else of the indexer.
"""
