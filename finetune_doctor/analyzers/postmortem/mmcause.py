"""A multimodal sample whose image (or video) placeholders were cut: the features/tokens mismatch read as what it says.

transformers' Qwen2-VL family checks, before it scatters the vision tower's output into the text embeddings, that
the number of placeholder tokens in ``input_ids`` equals the number of features the tower returned, and raises
``ValueError`` otherwise. Its wording changed across releases:

- ``Image features and image tokens do not match: tokens: 720, features 360`` (transformers 4.45-4.49,
  models/qwen2_vl/modeling_qwen2_vl.py ``Qwen2VLForConditionalGeneration.forward``);
- ``Image features and image tokens do not match, tokens: 1991, features: 2990`` (transformers 5.6.0,
  models/qwen2_vl/modeling_qwen2_vl.py:1169 and models/qwen2_5_vl/modeling_qwen2_5_vl.py:1215,
  ``get_placeholder_mask``); the same with ``Video features and video tokens``.

What the two numbers establish: LLaMA-Factory expands each ``<image>`` into as many placeholder tokens as the
processor's grid gives (data/mm_plugin.py, the Qwen2-VL plugin's ``process_messages``: ``image_grid_thw.prod() //
merge_length``), then fits the sample into ``cutoff_len`` by cutting the prompt and response
(data/processor/supervised.py:73, ``infer_seqlen``), while every image still reaches the vision tower. A cut only
ever *removes* placeholders, so **fewer tokens than features** is the shape truncation by cutoff_len leaves (rule
image-tokens-exceed-cutoff). More tokens than features is not: a cut cannot add placeholders (the text itself
holding placeholder tokens, or a processor that resized differently from the expansion, can); that crash stays a
plain run-crashed. **No placeholder at all** (``tokens: 0``) is not a cut either: the sample's text held no
``<image>`` tag for LLaMA-Factory to expand (LlamaFactory#8393: self-made data in the mllm_demo layout, "tokens: 0,
features 777"; the maintainer pointed at data/README.md's format), which `no_placeholder` words for run-crashed.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence

MISMATCH = re.compile(r"(?P<kind>Image|Video) features and (?:image|video) tokens do not match[:,] tokens: "
                      r"(?P<tokens>\d+), features:? (?P<features>\d+)")


def image_cut(ev: Evidence) -> dict[str, Any] | None:
    """``ev.image_cut``: {state: "cut", modality: image|video, tokens, features, missing, text, location} from the
    first exception line of the mismatch with fewer placeholder tokens than features (module docstring), or None
    (no such line, or a mismatch the other way)."""
    for f in ev.files:
        for n in f.notices:
            if n.kind != "exception":
                continue
            m = MISMATCH.search(n.text)
            if m is None:
                continue
            tokens, features = int(m.group("tokens")), int(m.group("features"))
            if tokens >= features or tokens == 0:
                return None
            return {"state": "cut", "modality": m.group("kind").lower(), "tokens": tokens, "features": features,
                    "missing": features - tokens, "text": m.group(0), "location": location_of(n.file, n.line)}
    return None


NONE_PLACED = re.compile(r"(?P<kind>Image|Video) features and (?:image|video) tokens do not match[:,]?\s*tokens:\s*0\s*,"
                         r"\s*features:?\s*(?P<features>\d+)", re.I)


def no_placeholder(msg: str) -> str | None:
    """Words for the features/tokens mismatch with no placeholder token at all (`msg` holding "tokens: 0,
    features N", module docstring), or None for another message."""
    m = NONE_PLACED.search(msg)
    if m is None:
        return None
    tag = "<image>" if m.group("kind").lower() == "image" else "<video>"
    return (f"no placeholder token reached the model for its {m.group('features')} {m.group('kind').lower()} "
            f"features, so the sample's text held no `{tag}` tag where its {m.group('kind').lower()} goes: "
            f"LLaMA-Factory expands each `{tag}` in the messages into the placeholder tokens the processor's grid "
            "gives (data/mm_plugin.py `process_messages`), and a dataset written in another layout than data/"
            f"README.md's (the tag left out of the text, or a column the dataset_info entry does not map) leaves "
            f"none; put one `{tag}` per {m.group('kind').lower()} in each sample's text (a cut by cutoff_len removes "
            "placeholders only in part, never all of them while the prompt remains)")
