"""Analyzers of per-card GPU memory: the gpus facts and the causes of uneven cards."""
