"""``cfg``: the merged LLaMA-Factory YAML keys, after ``key=value`` overrides, as the plain values LF parses.

Declared fields are every key of the bundled key schema (catalog/lf_keys.json: LLaMA-Factory's and transformers'
argument dataclasses, retired and derived keys), so a rule that names a key no LLaMA-Factory version knows fails
to load. Values are what OmegaConf hands ``HfArgumentParser.parse_dict`` (readers/config/yamlcfg.py); a key the file does
not set reads as None.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from finetune_doctor.facts.schema import Field, Namespace, OPEN


@lru_cache(maxsize=1)
def namespace() -> Namespace:
    from finetune_doctor.readers.config.keyschema import load_schema

    schema = load_schema()
    names = set(schema.get("keys") or ()) | set(schema.get("retired") or ()) | set(schema.get("derived") or ())
    fields: dict[str, Field] = {k: OPEN(f"LLaMA-Factory key {k}", type="any") for k in sorted(names)}
    return Namespace("cfg", __doc__.split("\n\n")[0], fields)


def assemble(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``cfg`` facts of a read config: its merged values (not copied; facts are read-only to rules)."""
    return values if isinstance(values, dict) else dict(values)
