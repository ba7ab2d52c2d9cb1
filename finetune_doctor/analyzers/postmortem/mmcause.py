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
plain run-crashed.
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
            if tokens >= features:
                return None
            return {"state": "cut", "modality": m.group("kind").lower(), "tokens": tokens, "features": features,
                    "missing": features - tokens, "text": m.group(0), "location": location_of(n.file, n.line)}
    return None
