"""The parts of a served index (indexer/format/served_index.py, the interface and its factory):
typed search parameters (`params`), a FAISS index's exact rows (`flat`), a FAISS index served
(`mapped`), and the search inside allowed rows each kind shares (`allowed`)."""
