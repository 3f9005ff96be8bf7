"""CDS, the contextual dependency score of sparse features (docs/explanation/cds.md#the-method).

For one sparse feature of a ViT image tower (a CEDAR concept read off the per-patch joint-space
embeddings, an SAE latent of the patch tokens, or a channel of the constructed model), CDS asks
whether the feature's activation map follows the pixels (local scope: objects, textures) or
the context the patch sits in (global scope: scene context, high-norm outlier tokens):

    CDS(f) = mean over f's top-m images x of  EMD(â_f(x, A), â_f(x, B)) / (√2·(p − s − 1))

where A and B are two crops of x offset by s patches, â_f(x, ·) is f's activation map on the
(p − s)² patches the crops share, normalised to sum 1, and the EMD's ground cost is the
Euclidean distance between patch centres (in patches). Modules:

- `emd`: the mathematics (ground cost, EMD, CDS of one feature, threshold rules, ROC AUC);
- `cropping`: the shifted-context crops and the shared-patch geometry;
- `patches`: patch tokens and per-patch joint embeddings of an open_clip ViT, and the features
  read from them (CEDAR concepts, SAE latents, plain channels);
- `outliers`: high-norm outlier tokens and each feature's activation share on them;
- `constructed`: a small ViT-like model whose features are local or global by construction;
- `config`: `CdsConfig`, how CDS is measured; `images`: the images it is measured over;
- `score`: the pipeline over a set of images; `result`: its table and summary; `report`: its
  files; `cli`: `strata eval cds`.
"""
