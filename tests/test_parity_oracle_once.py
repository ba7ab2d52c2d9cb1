"""The parity oracles build LF's argument parser once per list of dataclasses (tests/parity/oracle.py
`build_parsers_once`): the same list gets the parser built for it, another list or other options a parser of their
own, and the parser answers as a fresh one would. Runs without LF (a stand-in class counts the builds)."""

from __future__ import annotations

import dataclasses
import types

from parity.oracle import build_parsers_once


@dataclasses.dataclass
class A:
    x: int = 1


@dataclasses.dataclass
class B:
    y: str = "b"


class Parser:
    built = 0

    def __init__(self, dataclass_types, **kwargs):
        Parser.built += 1
        self.dataclass_types, self.kwargs = list(dataclass_types) if isinstance(dataclass_types, list) \
            else [dataclass_types], kwargs

    def parse_dict(self, args):
        return tuple(t(**{k: v for k, v in args.items() if k in {f.name for f in dataclasses.fields(t)}})
                     for t in self.dataclass_types)


def test_one_parser_per_list_of_dataclasses() -> None:
    mod = types.SimpleNamespace(HfArgumentParser=Parser)
    Parser.built = 0
    build_parsers_once(mod)
    first = mod.HfArgumentParser([A, B])
    assert mod.HfArgumentParser([A, B]) is first and mod.HfArgumentParser((A, B)) is first and Parser.built == 1
    assert mod.HfArgumentParser([B, A]) is not first and mod.HfArgumentParser(A) is not first
    assert mod.HfArgumentParser([A, B], allow_abbrev=False) is not first and Parser.built == 4
    # each call still reads its own dict: the reused parser keeps nothing of the last one
    assert first.parse_dict({"x": 5}) == (A(5), B()) and first.parse_dict({"y": "z"}) == (A(), B("z"))
