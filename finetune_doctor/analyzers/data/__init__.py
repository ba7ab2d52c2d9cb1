"""Analyzers of the data: templates, converters, tokenizers and the token-length scan against cutoff_len."""
