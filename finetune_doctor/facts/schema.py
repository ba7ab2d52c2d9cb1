"""Declarations of the fact namespaces that rules read: every field a rule may name, with its type and meaning.

A rule file names facts as ``ns.field.sub`` inside ``when``, ``for_each``, message placeholders, ``location`` and
``fix``. The rule loader (engine/loader.py) resolves each such name against these declarations, so a misspelt
``run.finetuning_typ`` is a load error naming the rule file and line instead of a rule that silently never fires.

A `Field` whose value is a mapping may declare its own `fields` (then a sub-name is checked) or be `open` (any
sub-name is accepted: DeepSpeed's own config keys, per-term byte tables). A field holding a list of mappings
declares `items`, the fields of each element; ``for_each`` over it binds ``item`` to that shape.

Pure Python, imported by the rule loader on the lint path: no project module beyond this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

TYPES = ("any", "bool", "int", "float", "number", "str", "list", "dict", "tuple")


@dataclass(frozen=True)
class Field:
    """One declared fact. `type` is one of TYPES (informative; "number" is int or float, any may also be None).

    `fields` declares the sub-fields of a mapping value; `items` those of each element of a list value;
    `open` accepts any sub-name below this field (its keys come from an open-ended source). `values` lists every
    value a str field can take, where the producer declares them: a rule's message table switching on this field
    may only name these values (engine/loader.py checks it at load).
    """

    type: str = "any"
    doc: str = ""
    fields: Mapping[str, "Field"] | None = None
    items: Mapping[str, "Field"] | None = None
    open: bool = False
    values: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Namespace:
    """A fact namespace (``cfg``, ``run``, ...): its fields and the commands that assemble it.

    `open` namespaces accept names outside `fields` (none of the bundled ones is open; ``cfg`` declares every key of
    LLaMA-Factory's schema instead).
    """

    name: str
    doc: str
    fields: Mapping[str, Field] = field(default_factory=dict)
    open: bool = False


def F(type: str = "any", doc: str = "", *, fields: Mapping[str, Field] | None = None,
      items: Mapping[str, Field] | None = None, open: bool = False,
      values: tuple[str, ...] | None = None) -> Field:
    """Shorthand for declaring a `Field`."""
    if type not in TYPES:
        raise ValueError(f"unknown fact type {type!r}")
    return Field(type, doc, fields, items, open, values)


def OPEN(doc: str = "", type: str = "dict") -> Field:
    """A mapping field whose sub-names are not declared (any is accepted)."""
    return Field(type, doc, None, None, True)


def LOCATION() -> Field:
    """The ``location`` mapping some list items carry ({file, line, column, key}), for ``location.from``."""
    return F("dict", "where the item points: file, line, column, key", fields={
        "file": F("str", "path"), "line": F("int", "1-based line"), "column": F("int", "1-based column"),
        "key": F("str", "dotted key"),
    })
