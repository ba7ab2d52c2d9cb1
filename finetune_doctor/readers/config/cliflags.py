"""A run given as a command line of flags instead of a YAML (train, and export/chat/eval, `SUBCOMMANDS`): LLaMA-Factory WebUI's "preview command"
(``llamafactory-cli train --stage sft --do_train True --model_name_or_path ... \\``, LF main webui/common.py
``gen_cmd`` L182-199, pasted with or without its ```` ```bash ```` fence), a ``.sh`` that runs it, the older
``python src/train.py --stage sft ...`` / ``deepspeed src/train_bash.py ...`` forms, or the same words after
``doctor check --``.

``llamafactory-cli train`` hands argv to LLaMA-Factory's parser when its first argument is not a ``.yaml``/``.json``
file (LF main hparams/parser.py ``read_args`` L112-126), and transformers' HfArgumentParser reads it
(hf_argparser.py ``_parse_dataclass_field``): ``--key value`` and ``--key=value``, ``--key-with-dashes`` for
``key_with_dashes``; a bool field takes an optional value (``--do_train`` alone is True; yes/true/t/y/1 and
no/false/f/n/0, any case, else "Truthy value expected"); a bool field whose default is True also has
``--no_key``; a list field takes one or more values (nargs "+"); every other field exactly one value, converted by
its type. The fields' types and defaults are the key schema's (catalog/lf_keys.json, LF's own dataclasses);
a key the schema does not know keeps its value typed as YAML would type it (the key check reports it).

The result is the same `ConfigDoc` a YAML gives, each key placed at the line of its flag, so `check`, `estimate`
and `lint` judge it like a YAML. Pure Python, no argparse: bad input is an InputError naming the file and line.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Callable

from finetune_doctor.errors import InputError

# the words that start LLaMA-Factory's training with flags after them (the launcher's own words are skipped)
_ENTRY = re.compile(r"^(?:llamafactory-cli|lmf)$")
# the subcommands whose argv LF's parsers read as flags when the first argument is not a .yaml/.json (LF main
# cli.py COMMAND_MAP: train, export, chat, webchat, api, eval, each through hparams/parser.py read_args), and
# whose configs the doctor judges by their keys (readers/config/lfkind.py): trial 9, `-- llamafactory-cli chat`
# and an `llamafactory-cli export ...` script were refused while the same keys in a YAML were read
SUBCOMMANDS = ("train", "export", "chat", "webchat", "api", "eval")
# train.py / train_bash.py and the pre-0.7 export script (src/export_model.py, the same flags as `export`)
_SCRIPT = re.compile(r"(?:^|/)(?:train|train_bash|export_model)\.py$")
# a cheap first look: an entry word followed by one of SUBCOMMANDS, or one of those scripts, anywhere in the text
_HINT = re.compile(r"(?:llamafactory-cli|lmf)\s+(?:train|export|chat|webchat|api|eval)\b"
                   r"|(?:train|train_bash|export_model)\.py\b")
_TRUE = ("yes", "true", "t", "y", "1")
_SHELL_SPECIAL = re.compile(r"['\"\\#]")   # what makes shlex's POSIX split differ from a split on its whitespace
_SHELL_SPACE = re.compile(r"[ \t\r\n]+")       # shlex.shlex.whitespace
_FALSE = ("no", "false", "f", "n", "0")


def is_command_word(word: str) -> bool:
    """Whether `word` (a ``doctor check`` CONFIG argument) starts a LLaMA-Factory command line rather than naming a
    file: ``llamafactory-cli`` or ``lmf``."""
    return bool(_ENTRY.match(word.strip()))


def looks_like_command(text: str) -> bool:
    """Whether a file's text is a training command line (`_command_line`: an entry word or a train script on a line
    that is not YAML) rather than a YAML mapping. Cheap: a YAML config's lines are ``key: value``."""
    if _HINT.search(text) is None:   # ~20 µs: every YAML is read through here, `doctor lint` included (issue #22)
        return False
    return any(_command_line(words) for _lines, words in _logical_lines(text))


def _command_line(words: list[str]) -> bool:
    """Whether a logical line is a shell command that starts LLaMA-Factory's training: an entry word or a train
    script among its words, and a first word that is not YAML (``key:`` or a ``- item``)."""
    return bool(words) and not words[0].endswith(":") and not words[0].startswith("-") and any(
        _ENTRY.match(w) or _SCRIPT.search(w) for w in words)


def _logical_lines(text: str) -> list[tuple[list[int], list[str]]]:
    """The text's commands as (line of each word, words): ``\\`` (bash) and a trailing backtick (the WebUI's
    Windows form) continue a line; blank lines, ``#`` comments and markdown fences are dropped. A line shlex
    cannot split (an open quote) is split on whitespace."""
    out: list[tuple[list[int], list[str]]] = []
    lines: list[int] = []
    words: list[str] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        if not s or s.startswith("#") or s.startswith("```"):
            if words and not s:
                out.append((lines, words))
                lines, words = [], []
            continue
        cont = s.endswith("\\") or s.endswith("`")
        if cont:
            s = s[:-1]
        if _SHELL_SPECIAL.search(s) is None:
            # what shlex.split gives a line without quotes, escapes or comments (its whitespace is ASCII only)
            parts = [w for w in _SHELL_SPACE.split(s) if w]
        else:
            try:
                parts = shlex.split(s, comments=True)
            except ValueError:
                parts = s.split()
        words += parts
        lines += [no] * len(parts)
        if not cont:
            out.append((lines, words))
            lines, words = [], []
    if words:
        out.append((lines, words))
    return out


def _flags_of(lines: list[int], words: list[str], path: str) -> tuple[list[int], list[str]]:
    """The words after ``llamafactory-cli train`` / ``lmf train`` or a ``train.py`` script. A YAML named there
    instead of flags is an InputError saying which file to check."""
    for i, w in enumerate(words):
        start = None
        if _ENTRY.match(w):
            if i + 1 >= len(words) or words[i + 1] not in SUBCOMMANDS:
                sub = words[i + 1] if i + 1 < len(words) else "nothing"
                raise InputError(f"this command runs `{w} {sub}`, which reads no run config: the doctor checks the "
                                 f"flags (or the YAML) of `{w} {'|'.join(SUBCOMMANDS)}`", file=path, line=lines[i])
            start = i + 2
        elif _SCRIPT.search(w):
            start = i + 1
        if start is None:
            continue
        rest = words[start:]
        if rest and not rest[0].startswith("-") and rest[0].lower().endswith((".yaml", ".yml", ".json")):
            verb = "trains from" if _SCRIPT.search(w) or words[i + 1] == "train" else f"runs `{words[i + 1]}` on"
            raise InputError(f"this command {verb} {rest[0]}: run `doctor check {rest[0]}` (key=value "
                             "overrides after it), with --launch for this file", file=path, line=lines[start])
        return lines[start:], rest
    raise InputError("no `llamafactory-cli train|export|chat|...` (or train.py) command with --flags found",
                     file=path, line=1)


def launch_line_of(text: str) -> tuple[int, str] | None:
    """(line, first words) of the first shell command line in `text` that launches Python or LLaMA-Factory
    (``llamafactory-cli``, ``accelerate launch``, ``torchrun``, ``deepspeed``, ``python``), for the message of a
    script whose command the doctor does not read; None when there is none."""
    for lines, words in _logical_lines(text):
        if words and not words[0].endswith(":") and any(
                _ENTRY.match(w) or w in ("accelerate", "torchrun", "deepspeed") or re.match(r"python[0-9.]*$", w)
                for w in words):
            return lines[0], " ".join(words[:4]) + (" ..." if len(words) > 4 else "")
    return None


def _field(key: str) -> dict[str, Any] | None:
    from finetune_doctor.readers.config.keyschema import load_schema

    return (load_schema().get("keys") or {}).get(key)


def _typed(key: str, raw: list[str], path: str, line: int, scalar: Callable[[str], Any]) -> Any:
    """`raw` (the words after ``--key``) converted as HfArgumentParser converts them for the schema's field."""
    f = _field(key)
    accepts = set((f or {}).get("accepts") or ())
    ftype = str((f or {}).get("type") or "")
    if f is not None and accepts <= {"bool", "null"} and "bool" in accepts:
        if not raw:
            return True   # nargs "?" with const True
        if len(raw) > 1:
            raise InputError(f"--{key} takes one value, got {len(raw)}: {' '.join(raw)}", file=path, line=line)
        low = raw[0].lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise InputError(f"--{key} {raw[0]}: truthy value expected (yes/no, true/false, t/f, y/n, 1/0), as "
                         "transformers' HfArgumentParser requires", file=path, line=line)
    if not raw and f is not None and accepts == {"bool", "str"} and "none" not in ftype.lower():
        # a `str | bool` field (include_num_input_tokens_seen in transformers 5.x; plain bool before 4.57): the
        # parser drops `str` from a Union without None and declares the field as bool, nargs "?" const True
        # (transformers 5.6.0 hf_argparser.py L169-181 then L203-219), so the bare flag is True (trial 10 case 03)
        return True
    if not raw:
        raise InputError(f"--{key} expects a value (HfArgumentParser: \"expected one argument\")", file=path,
                         line=line)
    if ftype.startswith("list[") or (len(raw) > 1 and "list" in accepts):
        return [_one(key, r, accepts, path, line, scalar) for r in raw]
    if len(raw) > 1:
        raise InputError(f"--{key} takes one value, got {len(raw)}: {' '.join(raw)} (quote a value with spaces)",
                         file=path, line=line)
    return _one(key, raw[0], accepts if f is not None else set(), path, line, scalar)


def _one(key: str, word: str, accepts: set[str], path: str, line: int, scalar: Callable[[str], Any]) -> Any:
    if not accepts:
        return scalar(word)   # a key the schema does not know: as YAML types it
    if "bool" in accepts and word.lower() in ("true", "false"):
        return word.lower() == "true"   # a str-or-bool field (include_num_input_tokens_seen): as the YAML reads it
    try:
        if "str" in accepts:
            return word
        if "float" in accepts:
            return float(word)
        if "int" in accepts:
            return int(word)
    except ValueError:
        kind = "a number" if "float" in accepts else "an integer"
        raise InputError(f"--{key} {word}: {kind} expected", file=path, line=line) from None
    return scalar(word)


def parse_command(text: str, path: str, scalar: Callable[[str], Any]
                  ) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """The YAML keys (`values`) and their (line, column) `positions` of the first training command in `text`
    (module docstring); `scalar` types a value of a key the schema does not know (yamlcfg.py `type_scalar`, passed
    in so that the YAML reader imports this module and not the other way). Raises InputError (file, line) for a command that is not a training run's, a word that
    is not a flag, a flag without the value it needs, or a value its field's type refuses."""
    cmds = [c for c in _logical_lines(text) if _command_line(c[1])]
    if not cmds:
        raise InputError("no `llamafactory-cli train` (or train.py) command with --flags found", file=path, line=1)
    lines, words = _flags_of(*cmds[0], path)
    values: dict[str, Any] = {}
    positions: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(words):
        w, line = words[i], lines[i]
        if not w.startswith("--") or w == "--":
            raise InputError(f"`{w}` is not a --flag (LLaMA-Factory's parser stops on it: \"Some specified "
                             "arguments are not used by the HfArgumentParser\")", file=path, line=line)
        name, eq, inline = w[2:].partition("=")
        key = name.replace("-", "_")
        j = i + 1
        raw = [inline] if eq else []
        if not eq:
            while j < len(words) and not (words[j].startswith("--") and len(words[j]) > 2):
                raw.append(words[j])
                j += 1
        if key.startswith("no_") and not raw and _field(key[3:]) and _field(key[3:]).get("default") is True:
            key, value = key[3:], False   # the complement of a bool field that defaults to True
        else:
            value = _typed(key, raw, path, line, scalar)
        values[key] = value
        positions[key] = (line, 1)
        i = j
    if not values:
        raise InputError("the training command has no --flags", file=path, line=lines[0] if lines else 1)
    return values, positions


def as_launch(config: str, launch: str | None) -> str | None:
    """The launch file to read for `config`: `launch` (``--launch``) when given, else `config` itself when it is a
    training command (`looks_like_command`: a .sh or the WebUI's preview states how the run starts, FORCE_TORCHRUN
    and the like included), else None. Reads at most the file's text; never raises (a file that cannot be read is
    reported where the config is read)."""
    import os

    # a regular file only: opening a FIFO or a device here would block or read forever (readers/textfile.py
    # refuses those where the config is read)
    if launch or is_command_word(config) or not os.path.isfile(config):
        return launch
    try:
        with open(config, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
    except OSError:
        return None
    return config if looks_like_command(text) else None
