"""Read a LLaMA-Factory training YAML the way ``llamafactory-cli train config.yaml key=value`` reads it.

LLaMA-Factory loads the file with ``OmegaConf.load``, merges ``OmegaConf.from_cli(argv[2:])`` over it and hands the
plain dict to ``HfArgumentParser.parse_dict`` (LF_FACTS.md §1; LLaMA-Factory ``src/llamafactory/hparams/parser.py:112-124``).
OmegaConf types scalars with PyYAML's YAML-1.1 resolvers plus its own float pattern, so:

* ``1e-4`` and ``1e5`` are floats (plain YAML 1.1 would keep ``1e-4`` a string),
* ``on/off/yes/no`` (any case variant PyYAML knows) are booleans,
* ``null``/``~``/empty are None; quoted scalars stay strings.

We parse with ruamel.yaml's round-trip loader to keep the (line, column) of every key, then re-type plain scalars with
those rules. Positions are 1-based.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers.limits import MAX_DEPTH, MAX_INT_DIGITS, MAX_CONFIG_NODES, LimitExceeded
from finetune_doctor.types import SourceDoc

# OmegaConf's float resolver (omegaconf/_utils.py get_yaml_loader): decimals, exponent-only forms, inf and nan.
_OMEGA_FLOAT = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
    r"|\.[0-9_]+(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN))$"
)
# PyYAML's YAML-1.1 bool resolver (yaml/resolver.py); 'y'/'n' are not in it.
_BOOLS = {s: True for s in ("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")}
_BOOLS.update({s: False for s in ("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")})
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
_NULLS = {"null", "Null", "NULL", "~", ""}


@dataclass(frozen=True)
class ConfigDoc:
    """A LLaMA-Factory YAML after overrides. `values` is the plain typed dict LF would pass to parse_dict.

    `positions` maps each top-level or dotted key to its (line, column) in the file; `overrides` holds the
    ``key=value`` pairs merged from the command line (they have no position in the file).
    """

    path: str
    values: dict[str, Any]
    positions: dict[str, tuple[int, int]]
    overrides: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    # keys the file repeats, {key, line, first_line, same} each (the last value is in `values`): facts/lint.py
    # judges them per LLaMA-Factory release
    duplicates: tuple[dict[str, Any], ...] = ()
    # the file as given is refused by PyYAML, LF's loader, and was read without its cut last line
    # (`_parse_maybe_cut`): {line, word, message}; None when the file loads as it is
    refused: dict[str, Any] | None = None

    def source(self) -> SourceDoc:
        return SourceDoc("config", self.path, dict(self.positions))

    def line_of(self, key: str) -> int | None:
        pos = self.positions.get(key)
        return pos[0] if pos else None


def type_scalar(v: Any) -> Any:
    """Re-type one plain scalar the way OmegaConf's YAML loader would have typed it."""
    # Only ruamel's round-trip tree holds ScalarStrings, so with ruamel.yaml not imported none can be here: the
    # text reporter types every fix's value through this function, and importing ruamel.yaml for that alone cost
    # ~11 ms of CPU in a lint of LLaMA-Factory's 95 examples (issue #22).
    scalars = sys.modules.get("ruamel.yaml.scalarstring")
    if scalars is not None and isinstance(v, scalars.ScalarString):  # quoted or block scalar: stays a string
        return str(v)
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, str):
        if v in _BOOLS:
            return _BOOLS[v]
        if v in _NULLS:
            return None
        if _INT.match(v):
            return int(v.replace("_", ""))
        if _OMEGA_FLOAT.match(v):
            return float(v.replace("_", ""))
        return v
    if isinstance(v, float):
        return float(v)
    if isinstance(v, int):
        return int(v)
    return v


def _plain(node: Any, prefix: str, positions: dict[str, tuple[int, int]], depth: int = 0,
           budget: list[int] | None = None) -> Any:
    """Plain values of ruamel's round-trip tree, under the same limits as the libyaml path (readers/limits.py)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    budget = [MAX_CONFIG_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise LimitExceeded(f"alias expansion exceeds {MAX_CONFIG_NODES} values (a billion-laughs guard)")
    if isinstance(node, (CommentedMap, CommentedSeq)) and depth >= MAX_DEPTH:
        raise LimitExceeded(f"nesting exceeds {MAX_DEPTH} levels")
    if isinstance(node, CommentedMap):
        out = {}
        for k in node:
            key = str(k)
            path = f"{prefix}.{key}" if prefix else key
            try:
                line, col = node.lc.key(k)
                positions[path] = (line + 1, col + 1)
            except (KeyError, TypeError, AttributeError):
                pass
            out[key] = _plain(node[k], path, positions, depth + 1, budget)
        return out
    if isinstance(node, CommentedSeq):
        return [_plain(x, prefix, positions, depth + 1, budget) for x in node]
    return type_scalar(node)


def _yaml_loader():
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    # YAML 1.2 core resolution keeps 'on'/'yes' as strings and '1e-4' as float; type_scalar then applies 1.1 rules.
    return y


def _typed_node(node: Any) -> Any:
    """`_typed` of a scalar node, remembered per (tag, style, text): every value it gives is immutable (str, int,
    float, bool, None) and reads nothing else of the node, and a lint of many configs types the same few dozen
    texts again and again (~4,600 scalars for LLaMA-Factory's 95 examples, issue #22). An integer past the digit
    limit raises each time (its line is the node's own)."""
    key = (node.tag, node.style, node.value)
    got = _TYPED.get(key, _TYPED)
    if got is _TYPED:
        got = _typed(node)
        if len(_TYPED) < 65536:
            _TYPED[key] = got
    return got


_TYPED: dict[tuple[Any, Any, str], Any] = {}


def _typed(node: Any) -> Any:
    """Type a libyaml scalar node exactly as OmegaConf's loader does: PyYAML's YAML-1.1 implicit resolvers (bool,
    int incl. 0x/0o/sexagesimal, null, float) decided the node's tag; OmegaConf adds its float pattern for plain
    strings such as ``1e-4``. Quoted and block scalars are strings."""
    import yaml

    tag = node.tag
    if node.style or tag == "tag:yaml.org,2002:str":
        if not node.style and _OMEGA_FLOAT.match(node.value):
            return float(node.value.replace("_", ""))
        return node.value
    ctor = _CONSTRUCTORS.get(tag)
    if ctor is None:
        return node.value
    if tag == "tag:yaml.org,2002:int" and len(node.value) > MAX_INT_DIGITS:
        raise _IntTooLong(len(node.value), node.start_mark.line + 1)
    # one constructor for every scalar: these four read only the node (no state kept between calls); a new
    # SafeConstructor per scalar was ~4,600 objects for a lint of LF's 95 examples
    global _SAFE
    if _SAFE is None:
        _SAFE = yaml.constructor.SafeConstructor()
    return ctor(_SAFE, node)


_SAFE: Any = None


class _IntTooLong(Exception):
    def __init__(self, digits: int, line: int | None):
        super().__init__(digits)
        self.digits, self.line = digits, line


def _ctor_table() -> dict[str, Any]:
    try:
        import yaml
    except ImportError:
        return {}
    c = yaml.constructor.SafeConstructor
    return {"tag:yaml.org,2002:bool": c.construct_yaml_bool, "tag:yaml.org,2002:int": c.construct_yaml_int,
            "tag:yaml.org,2002:float": c.construct_yaml_float, "tag:yaml.org,2002:null": c.construct_yaml_null}


_CONSTRUCTORS = _ctor_table()


def parse_yaml_text(text: str, path: str, duplicates: list[dict[str, Any]] | None = None
                    ) -> tuple[Any, dict[str, tuple[int, int]]]:
    """Parse YAML text into plain typed Python values plus key positions; raises InputError with the line.

    A repeated key raises InputError, unless `duplicates` is a list: then the last value wins (as PyYAML's
    ``yaml.safe_load`` keeps it, which LLaMA-Factory 0.8.0-0.9.3 read configs with) and each repeat is appended
    there as ``{key, line, first_line, same}`` (readers/config/yamlnodes.py `to_python`); with only ruamel.yaml
    at hand (no PyYAML) a repeat is still refused.

    Uses libyaml through PyYAML when present (readers/config/yamlnodes.py), else ruamel.yaml's round-trip parser; both
    give the same values and positions (tests/test_yamlcfg.py checks it on every example config).
    """
    from finetune_doctor.readers.config import yamlnodes
    try:
        if yamlnodes.available():
            try:
                node = yamlnodes.compose(text)
                positions: dict[str, tuple[int, int]] = {}
                return yamlnodes.to_python(node, _typed_node, positions,
                                           allow_duplicates=duplicates if duplicates is not None else False), \
                    positions
            except yamlnodes.ParseError as err:
                raise InputError(f"malformed YAML: {err.problem}", file=path, line=err.line) from None
            except yamlnodes.DuplicateKey as err:
                raise InputError(f"malformed YAML: duplicate key {err.key!r}", file=path, line=err.line) from None
        return _parse_with_ruamel(text, path)
    except LimitExceeded as err:
        raise InputError(err.what, file=path, line=err.line) from None
    except _IntTooLong as err:
        raise InputError(f"an integer of {err.digits} digits exceeds the {MAX_INT_DIGITS}-digit limit", file=path,
                         line=err.line) from None


def _parse_with_ruamel(text: str, path: str) -> tuple[Any, dict[str, tuple[int, int]]]:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        data = _yaml_loader().load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        msg = (err.problem or err.context or "malformed YAML").strip()
        raise InputError(f"malformed YAML: {msg}", file=path, line=line) from None
    except YAMLError as err:
        raise InputError(f"malformed YAML: {err}", file=path) from None
    positions: dict[str, tuple[int, int]] = {}
    return _plain(data, "", positions), positions


# a last line that is one bare word with no colon ("lr_", "learning_ra"): a paste that stopped in the middle of a key
CUT_WORD = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _parse_maybe_cut(text: str, path: str, dups: list[dict[str, Any]], refused: list[dict[str, Any]] | None = None
                     ) -> tuple[Any, dict[str, tuple[int, int]]]:
    """`parse_yaml_text`, except that a file whose last non-blank line is a bare word cut mid-key (`CUT_WORD`, at
    the start of the line) and which parses without that line is read without it: a paste that stopped mid-token
    (trial 14: `lr_` after `num_train_epochs: 3`). The text is kept whole, so facts/cutpaste.py sees the cut
    (sign ``cut-mid-line``) and the rules that rest on an absent key hedge. The file as given would not load in
    LLaMA-Factory, so ``{line, word, message}`` (the cut line, its word, PyYAML's words: yamlnodes.py
    `loader_refusal`) is appended to `refused` (trial 18, LlamaFactory#8641: a last line `resources_per_worker`
    passed lint with exit 0). Any other YAML error is raised as before."""
    try:
        return parse_yaml_text(text, path, dups)
    except InputError:
        lines = text.splitlines()
        last = max((i for i, ln in enumerate(lines) if ln.strip()), default=None)
        if last is None or last == 0 or not CUT_WORD.match(lines[last]):
            raise
        try:
            parsed = parse_yaml_text("\n".join(lines[:last]) + "\n", path, dups)
        except InputError:
            parsed = None
        if parsed is None:
            raise
        if refused is not None:
            from finetune_doctor.readers.config.yamlnodes import loader_refusal

            refused.append({"line": last + 1, "word": lines[last].strip(),
                            "message": loader_refusal(text) or "malformed YAML"})
        return parsed


def parse_override(item: str) -> tuple[str, Any]:
    """One ``key=value`` dotlist item, value typed as YAML (OmegaConf.from_dotlist does the same)."""
    if "=" not in item:
        raise InputError(f"override {item!r} is not KEY=VALUE (llamafactory-cli takes key=value, not --key value)",
                         file="<command line>")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or key.startswith("-"):
        raise InputError(f"override {item!r}: bad key {key!r}", file="<command line>")
    if raw.strip() == "":
        return key, None
    value, _ = parse_yaml_text(raw, "<command line>")
    return key, value


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def load_config(path: str, overrides: tuple[str, ...] | list[str] = ()) -> ConfigDoc:
    """Read `path` (YAML or JSON; ``-`` is standard input) and merge `overrides`.

    Raises InputError for a missing, unreadable, non-UTF-8, empty or malformed file (readers/textfile.py decides
    how a file is read, the same way for every command), for input that breaches readers/limits.py, and for a
    top-level value that is not a mapping (LLaMA-Factory would fail in parse_dict).
    """
    from finetune_doctor.readers.config import cliflags
    from finetune_doctor.readers.textfile import STDIN, read_text

    if cliflags.is_command_word(path) and overrides and not os.path.exists(path):
        # `doctor check -- llamafactory-cli train --stage sft ...`: the words are the run (readers/config/cliflags.py)
        text = " ".join(shlex.quote(w) for w in (path, *overrides))
        values, positions = cliflags.parse_command(text, "<command line>", type_scalar)
        from finetune_doctor.readers.textfile import provide

        # the reporters read a fix's current value back from the config's text, as from a file (trial 5)
        provide("<command line>", text.encode("utf-8"))
        return ConfigDoc(path="<command line>", values=values, positions=positions, text=text)
    text = read_text(path, "LLaMA-Factory YAML")
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise InputError("empty file: no keys", file=path)
    dups: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    if cliflags.looks_like_command(text):
        # WebUI's preview command, a .sh: the flags are the keys, `key=value` overrides still apply after them
        values, positions = cliflags.parse_command(text, path, type_scalar)
    else:
        values, positions = _parse_maybe_cut(text, path, dups, refused)
    if not isinstance(values, dict):
        launch = cliflags.launch_line_of(text)
        if launch is not None:   # a shell line that runs no command the doctor reads (trial 9: export scripts)
            raise InputError(f"a launch script, not a config: `{launch[1]}` runs no LLaMA-Factory command whose "
                             f"flags the doctor reads ({'|'.join(cliflags.SUBCOMMANDS)}, train.py); give the YAML "
                             "it runs, or the flags after `doctor check --`", file=path, line=launch[0])
        raise InputError(f"top level must be a mapping of keys, found {type(values).__name__}", file=path, line=1)
    merged = dict(values)
    ov: dict[str, Any] = {}
    for item in overrides:
        k, v = parse_override(item)
        ov[k] = v
        _set_dotted(merged, k, v)
    return ConfigDoc(path="<stdin>" if path == STDIN else str(path), values=merged, positions=positions,
                     overrides=ov, text=text, duplicates=tuple(dups), refused=refused[0] if refused else None)
