"""The Beam jobs of the `mass` CLI: `extract` (embeddings) and `anonymize` (the gated release)."""
