"""Readers of DeepSpeed JSON: positions, "auto" resolved as HF resolves it, DeepSpeed's schema and its checks."""
