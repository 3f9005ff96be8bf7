"""CoSAE: coupled sparse autoencoders that compare two models' embeddings through shared concepts.

Two TopK SAEs, one per model (domain i, domain j), share the concept index: concept c of
domain i and concept c of domain j are meant to be the same concept. Reconstruction per domain,
instance translation and concept consistency on a small paired subset, and distributional
alignment of the concept activations on all (unpaired) data tie the two together
(docs/explanation/cosae.md).

    losses      the loss terms, one pure function each
    model       the coupled model (two TopK SAEs sharing a concept index)
    config      the loss weights and the run's config
    objective   the weighted loss terms of one step
    train       its training on the shared loop (checkpointed, resumable)
    crosscoder  the crosscoder baseline (one code from both domains)
    baselines   Procrustes, least squares, universal SAE, matched uncoupled SAEs
    metrics     extraction, translation, concept consistency, cycle, shared-factor recovery
    pairs       the data pairs: synthetic (known factors), MiniLM vs TF-IDF, MiniLM vs a layer
    methods     every method behind one interface, and the one code that scores it
    evaluate    every method on one split per paired fraction (results kept, reused)
    report      the table's columns, the Markdown table and the plot
    cli         `strata train cosae` and `strata eval cosae`
"""
