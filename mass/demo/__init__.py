"""The coloured-MNIST demo: its dataset, its CNN feature extractor and that extractor's training.

Only the demo pipeline (``mass prepare``, ``mass train-extractor``, the ``mnist_cnn`` Triton
model), benchmarks and tests use this package; the anonymization product (modifiers, serving,
the Beam jobs, the audit) never imports it. Modules, one job each, no import cycle:
``coloured_mnist`` (the dataset: build, write, read the raw splits), ``augment`` (colour-
preserving SimCLR augmentations), ``extractor`` (the CNN, its training, save/load, embedding),
``features`` (dataset + extractor: train-and-save with a probe, embedding Parquet, the cache).
"""
