"""Analyzers of the config itself: what LLaMA-Factory, transformers and accelerate reject at launch."""
