"""Readers of the training config and its launch: the LLaMA-Factory YAML (typed as OmegaConf types it, with positions), its key schema, accelerate configs and launch lines, the training stack's versions, and the ``doctor context`` file (``context``: the
training machine captured once)."""
