"""Analyzers: facts computed from the resolved run and the evidence, grouped by what they judge.

==============  ============================================================================================
memory/         the analytic memory model (one module per term), parameter counts (params), the allocator
                reserve by shape class (reserve), the launcher's allocator environment (launchenv), the error
                model and verdict (uncertainty)
data/           templates, converters, tokenizers and the token-length scan against cutoff_len
postmortem/     curves, detectors, failures, ranks and collectives, OOM causes, the timeline of a run
gpus/           per-card memory facts and the causes of uneven cards
config/         what LLaMA-Factory, transformers and accelerate reject while parsing a config (launch)
==============  ============================================================================================
"""
