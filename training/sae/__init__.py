"""Sparse autoencoders: one base (`base`), one small sibling per variant (`topk`, `batchtopk`,
`matryoshka`, `relu`), the registry of their names (`registry`), their config (`config`) and
their training on the shared loop (`train`)."""
