"""The hostile corpus of issue 17, generated (never committed): at least 1,000 inputs over classes 1-6.

`build(root)` writes every input under `root` and returns the `Case` list: which class it belongs to, which
commands read it (argv lists, in-process), and what it is. Classes (issue 17):

1. resource bombs: YAML alias expansion, recursive aliases and merge keys (also in ``key=value`` overrides), deep
   nesting in YAML and JSON, integers over 4,300 digits, ``.inf``/``1e400``/``Infinity`` where an integer is
   expected, steps of 2^63;
2. wrong shapes and values: lists for mappings, strings for counts, zero and negative sizes;
3. files that are not regular: FIFOs, /dev/zero, symlink loops, names too long for the OS, corrupt gzip, truncated
   parquet and event files, non-UTF-8 dataset_info.json, lone surrogates;
4. decoding: UTF-16/UTF-32/latin-1/empty/NUL/BOM-only files, control characters;
5. cost that grows with the input: 10M layers, 100k trainer_state entries, 10k GPU cards, 200k-key DeepSpeed JSON,
   a log with no newline;
6. terminal safety: escape sequences in keys, values, log lines, card and dataset names.

``scripts/gen_hostile_corpus.py`` writes the same corpus to a folder, for running it through the installed
``doctor`` by hand.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field

GPU = ["--gpu", "A100-80GB", "--offline"]
BASE_YAML = ("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
             "lora_target: all\ndataset: alpaca_en_demo\ntemplate: qwen\ncutoff_len: 2048\noutput_dir: saves/x\n"
             "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nlearning_rate: 1.0e-4\n"
             "num_train_epochs: 3.0\nbf16: true\n")
BASE_DS = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
           "zero_optimization": {"stage": 3, "overlap_comm": False, "contiguous_gradients": True,
                                 "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                                 "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
ESC = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\x1b[31mred\x1b[0m", "\x9b31m", "\x1bP+q\x1b\\", "\r\x1b[Kover"]
# YAML text of values where a count, a size or a flag is expected
YAML_VALUES = [".inf", "-.inf", ".nan", "1e400", "-1e400", str(2**63), str(2**63 - 1), str(-(2**63) - 1), "0", "-1",
               "-8", "9" * 5000, "[1, 2]", "{a: 1}", '"12"', "abc", "null", "~", "true", "0x7fffffffffffffff",
               "1_000", "0o777", '"\\e]0;title\\a"', "!!binary aGk=", "!!python/object/apply:os.system [ls]",
               "10000000", "&x [*x]", "[[[[[[[[]]]]]]]]", "1.5", "''", "!!float 1e999", '"\\ud800"']
YAML_KEYS = ["per_device_train_batch_size", "gradient_accumulation_steps", "cutoff_len", "num_train_epochs",
             "max_steps", "learning_rate", "lora_rank", "lora_alpha", "logging_steps", "save_steps", "warmup_steps",
             "max_samples", "preprocessing_num_workers", "dataloader_num_workers", "bf16", "fp16", "finetuning_type",
             "stage", "deepspeed", "dataset", "template", "model_name_or_path", "quantization_bit", "max_grad_norm",
             "seed", "lora_target", "flash_attn", "rope_scaling", "packing", "ddp_timeout", "gradient_checkpointing",
             "pure_bf16", "freeze_trainable_layers", "val_size", "eval_steps", "max_new_tokens", "lora_dropout",
             "optim", "neat_packing", "enable_liger_kernel"]
JSON_VALUES = ["Infinity", "-Infinity", "NaN", "1e400", str(2**63), "9" * 5000, "[]", "{}", '"x"', "-1", "0",
               "null", "true", '"\\ud800"', '"\\u001b]0;t\\u0007"', "[1, 2, 3]", '{"device": [1]}', "1.5", '"auto"']
DS_PATHS = [("zero_optimization", "stage"), ("zero_optimization", "offload_param"),
            ("zero_optimization", "offload_optimizer"), ("zero_optimization", "reduce_bucket_size"),
            ("zero_optimization", "stage3_max_live_parameters"), ("zero_optimization", "sub_group_size"),
            ("train_micro_batch_size_per_gpu",), ("gradient_accumulation_steps",), ("train_batch_size",),
            ("fp16",), ("bf16", "enabled"), ("zero_optimization",), ("gradient_clipping",),
            ("zero_optimization", "offload_param", "buffer_count"), ("activation_checkpointing",)]
MODEL_KEYS = ["num_attention_heads", "num_key_value_heads", "hidden_size", "intermediate_size", "num_hidden_layers",
              "vocab_size", "max_position_embeddings", "head_dim", "torch_dtype", "tie_word_embeddings",
              "num_experts", "rope_scaling", "model_type", "architectures"]
MODEL_VALUES = ["0", "-1", "1e400", "Infinity", "NaN", str(2**63), "10000000", '"4096"', "[4096]", "{}", "null",
                '"\\u001b[2Jx"', "1.5", "true"]


@dataclass
class Case:
    """One corpus input: `name` (unique), issue-17 class `klass` (1-6), and the argv lists that read it."""

    name: str
    klass: int
    argvs: list[list[str]] = field(default_factory=list)


class _Writer:
    def __init__(self, root: str):
        self.root, self.cases, self.n = root, [], 0

    def path(self, name: str) -> str:
        self.n += 1
        d = os.path.join(self.root, f"{self.n:05d}")
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, name)

    def file(self, name: str, data: bytes | str) -> str:
        p = self.path(name)
        with open(p, "wb") as fh:
            fh.write(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        return p

    def add(self, name: str, klass: int, *argvs: list[str]) -> None:
        if any(c.name == name for c in self.cases[-50:]):   # two values that print alike once shortened
            name = f"{name} #{self.n}"
        self.cases.append(Case(name, klass, [list(a) for a in argvs]))


def _config_commands(w: _Writer, cfg: str, name: str, klass: int, i: int) -> None:
    """lint, check, estimate or lint --fix in turn: each command sees a quarter of the grid's inputs (one run per
    input keeps the suite within its CI budget; every reader path is the same for the four)."""
    one = (["lint", cfg], ["check", cfg, "--no-data", *GPU], ["estimate", cfg, *GPU],
           ["lint", "--fix", "--unsafe-fixes", cfg])
    w.add(name, klass, one[i % 4])


def _yaml_cases(w: _Writer) -> None:
    i = 0
    for key in YAML_KEYS:
        for value in YAML_VALUES:
            body = "\n".join(ln for ln in BASE_YAML.splitlines() if not ln.startswith(key + ":"))
            cfg = w.file("train.yaml", body + f"\n{key}: {value}\n")
            klass = 1 if value in (".inf", "1e400", str(2**63), "9" * 5000, "&x [*x]", "!!float 1e999") else \
                6 if "\\e" in value else 2
            _config_commands(w, cfg, f"yaml {key}={value[:20]}", klass, i)
            i += 1
    nine = ",".join(["*{0}"] * 9)
    for depth in (3, 5, 7, 9, 12):
        lines = ["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
        for j in range(depth - 1):
            lines.append(f"{chr(98 + j)}: &{chr(98 + j)} [{nine.format(chr(97 + j))}]")
        for where in ("top", "value"):
            text = BASE_YAML + "\n".join(lines) + "\n" if where == "top" else \
                BASE_YAML + "x:\n" + "".join("  " + ln + "\n" for ln in lines)
            cfg = w.file("laughs.yaml", text)
            w.add(f"billion laughs depth {depth} {where}", 1, ["lint", cfg], ["check", cfg, "--no-data", *GPU],
                  ["estimate", cfg, *GPU], ["lint", "--fix", cfg])
    for text in ("a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a\n  <<: *a\n  x: 1\n", "a: &a\n  b:\n    <<: *a\n",
                 "a: &a [1, &b [*a, *b]]\n", "<<: {x: 1}\n<<: *missing\n", "*undefined\n", "a: *a\n"):
        cfg = w.file("recursive.yaml", BASE_YAML + text)
        w.add(f"recursive alias {text[:24]!r}", 1, ["lint", cfg], ["check", cfg, "--no-data", *GPU],
              ["estimate", cfg, *GPU])
    for depth in (65, 100, 900, 5000, 50000):
        block = "".join("  " * j + f"k{j}:\n" for j in range(min(depth, 2000))) + "  " * min(depth, 2000) + "v: 1\n"
        flow = "x: " + "[" * depth + "]" * depth + "\n"
        mixed = "x: " + "{a: [" * (depth // 2) + "1" + "]}" * (depth // 2) + "\n"
        for style, body in (("block", block), ("flow", flow), ("mixed", mixed)):
            cfg = w.file("deep.yaml", BASE_YAML + body)
            w.add(f"yaml nesting {depth} {style}", 1, ["lint", cfg], ["check", cfg, "--no-data", *GPU])


def _encoding_cases(w: _Writer) -> None:
    enc = {
        "utf-16": BASE_YAML.encode("utf-16"), "utf-16-le-bom": b"\xff\xfe" + BASE_YAML.encode("utf-16-le"),
        "utf-16-be-bom": b"\xfe\xff" + BASE_YAML.encode("utf-16-be"), "utf-32": BASE_YAML.encode("utf-32"),
        "utf-16-no-bom": BASE_YAML.encode("utf-16-le"), "latin-1": (BASE_YAML + "run_name: caf\xe9\n").encode("latin-1"),
        "cp1252": (BASE_YAML + "run_name: \u20ac\n").encode("cp1252"), "empty": b"", "blank": b"\n\n  \n",
        "bom-only": b"\xef\xbb\xbf", "utf8-bom": b"\xef\xbb\xbf" + BASE_YAML.encode(), "nul": BASE_YAML.encode() + b"\x00",
        "crlf": BASE_YAML.replace("\n", "\r\n").encode(), "cr-only": BASE_YAML.replace("\n", "\r").encode(),
        "doc-marker": b"---\n", "two-docs": (BASE_YAML + "---\n" + BASE_YAML).encode(), "list": b"- a\n- b\n",
        "scalar": b"just text\n", "comment-only": b"# nothing\n", "tabs": b"stage:\tsft\n\tx: 1\n",
        "overlong-utf8": BASE_YAML.encode() + b"run_name: \xc0\xaf\n", "surrogate-bytes": BASE_YAML.encode() + b"x: \xed\xa0\x80\n",
        "truncated-utf8": BASE_YAML.encode() + b"run_name: \xe6\xbc", "dup-key": (BASE_YAML + "stage: pt\n").encode(),
    }
    for i, (name, data) in enumerate(sorted(enc.items())):
        cfg = w.file("train.yaml", data)
        w.add(f"encoding {name}", 4, ["lint", cfg], ["check", cfg, "--no-data", *GPU], ["estimate", cfg, *GPU],
              ["lint", "--fix", cfg])
    controls = [chr(c) for c in list(range(0, 32)) + [127] + list(range(0x80, 0xA0))] + ["\u2028", "\ufeff", "\ufffe"]
    for i, ch in enumerate(controls):
        for where in ("key", "value", "comment"):
            line = {"key": f"ke{ch}y: 1", "value": f"run_name: a{ch}b", "comment": f"# a{ch}b"}[where]
            cfg = w.file("ctl.yaml", BASE_YAML + line + "\n")
            klass = 6 if ch in ("\x1b", "\x9b", "\x07") else 4
            w.add(f"control U+{ord(ch):04X} in {where}", klass, ["lint", cfg],
                  (["check", cfg, "--no-data", *GPU], ["estimate", cfg, *GPU])[i % 2])
    for s in ESC:
        for where in ("key", "value", "dataset"):
            line = {"key": f'"{s}": 1', "value": f"run_name: '{s}'", "dataset": f"dataset: '{s}'"}[where]
            text = (BASE_YAML + line + "\n").encode("utf-8", "surrogatepass")
            cfg = w.file("esc.yaml", text)
            w.add(f"escape {s!r} in yaml {where}", 6, ["lint", cfg], ["lint", cfg, "--format", "github"],
                  ["check", cfg, "--no-data", *GPU], ["lint", cfg, "--format", "concise"])


def _override_cases(w: _Writer) -> None:
    cfg = w.file("train.yaml", BASE_YAML)
    overrides = [f"{k}={v}" for k in ("per_device_train_batch_size", "cutoff_len", "gradient_accumulation_steps",
                                      "deepspeed", "num_train_epochs")
                 for v in ("&a [*a]", "*a", ".inf", "1e400", str(2**63), "9" * 5000, "-8", "0", "[1]", "{a: 1}",
                           "\x1b]0;t\x07", "", "&a {<<: *a}")]
    overrides += ["=1", "noequals", "\x1b[2J=1", "a.b.c=1", "k" * 5000 + "=1", "cutoff_len=" + "[" * 5000,
                  "stage=" + "{a: " * 1000 + "1" + "}" * 1000]
    for i, ov in enumerate(overrides):
        w.add(f"override {ov[:30]!r}", 1, ["check", cfg, ov, "--no-data", *GPU], ["estimate", cfg, ov, *GPU])


def _ds_doc(path: tuple[str, ...], value_text: str) -> str:
    marker = "__FUZZ__"
    doc = json.loads(json.dumps(BASE_DS))
    node = doc
    for k in path[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[path[-1]] = marker
    return json.dumps(doc, indent=2).replace(f'"{marker}"', value_text)


def _ds_cases(w: _Writer) -> None:
    i = 0
    for path in DS_PATHS:
        for value in JSON_VALUES:
            js = w.file("ds.json", _ds_doc(path, value))
            cfg = os.path.join(os.path.dirname(js), "train.yaml")
            with open(cfg, "w") as fh:
                fh.write(BASE_YAML + f"deepspeed: {js}\n")
            klass = 1 if value in ("Infinity", "1e400", str(2**63), "9" * 5000, "NaN") else \
                6 if "u001b" in value else 3 if "ud800" in value else 2
            third = (["check", cfg, "--no-data", "--gpu", "8xA100-80GB", "--offline"],
                     ["estimate", cfg, "--gpu", "8xA100-80GB", "--offline"], ["lint", "--fix", js])[i % 3]
            w.add(f"deepspeed {'.'.join(path)}={value[:20]}", klass, ["lint", cfg, js], third)
            i += 1
    specials = {
        "nesting 900": '{"zero_optimization": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}",
        "nesting 100000": "[" * 100000 + "]" * 100000, "list top": "[1, 2]", "string top": '"x"', "empty": "",
        "truncated": json.dumps(BASE_DS)[:57], "comments": '// c\n{"train_batch_size": 8}',
        "trailing comma": '{"train_batch_size": 8,}', "dup keys": '{"zero_optimization": {"stage": 3, "stage": 2}}',
        "esc key": json.dumps({"\x1b]0;pwned\x07": 1, "zero_optimization": {"\x1b[2Jstage": 3}}),
        "surrogate key": '{"\\ud800": 1, "zero_optimization": {"stage": 2}}',
        "200k keys": json.dumps({f"k{j}": j for j in range(200_000)}),
        "utf16": json.dumps(BASE_DS).encode("utf-16"), "latin1": '{"x": "caf\xe9"}'.encode("latin-1"),
        "nul": b'{"x": 1}\x00', "1e400 stage": '{"zero_optimization": {"stage": 1e400}}',
    }
    for name, text in specials.items():
        js = w.file("ds.json", text)
        cfg = os.path.join(os.path.dirname(js), "train.yaml")
        with open(cfg, "w") as fh:
            fh.write(BASE_YAML + f"deepspeed: {js}\n")
        w.add(f"deepspeed {name}", 5 if "200k" in name else 1, ["lint", cfg, js],
              ["check", cfg, "--no-data", "--gpu", "8xA100-80GB", "--offline"], ["lint", "--fix", js])
    for s in ESC:
        js = w.file("ds.json", json.dumps({**BASE_DS, s: {"x": s}}))
        w.add(f"deepspeed escape key {s!r}", 6, ["lint", js], ["lint", js, "--format", "sarif"])


def _model_cases(w: _Writer) -> None:
    base = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
            "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
            "vocab_size": 152064, "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False}
    for i, key in enumerate(MODEL_KEYS):
        for value in MODEL_VALUES:
            mc = w.file("config.json", json.dumps({**base, key: "__V__"}).replace('"__V__"', value))
            cfg = os.path.join(os.path.dirname(mc), "train.yaml")
            with open(cfg, "w") as fh:
                fh.write(BASE_YAML)
            klass = 5 if value == "10000000" else 1 if value in ("1e400", "Infinity", str(2**63)) else 2
            w.add(f"config.json {key}={value[:16]}", klass, ["estimate", cfg, "--model-config", mc, *GPU],
                  ["check", cfg, "--no-data", "--model-config", mc, *GPU])
    for name, text in (("deep", "[" * 5000 + "]" * 5000), ("utf16", json.dumps(base).encode("utf-16")),
                       ("empty", b""), ("list", b"[]"), ("text_config list", json.dumps({**base, "text_config": []})),
                       ("surrogate key", '{"\\udfff": 1}'), ("1e400", json.dumps(base).replace("28,", "1e400,", 1))):
        mc = w.file("config.json", text)
        cfg = os.path.join(os.path.dirname(mc), "train.yaml")
        with open(cfg, "w") as fh:
            fh.write(BASE_YAML)
        w.add(f"config.json {name}", 1, ["estimate", cfg, "--model-config", mc, *GPU])


def _trainer_line(**kw) -> str:
    rec = {"current_steps": 10, "total_steps": 100, "loss": 1.5, "lr": 1e-4, "epoch": 0.1, "percentage": 10.0,
           "elapsed_time": "0:00:10", "remaining_time": "0:01:30"}
    rec.update(kw)
    return json.dumps(rec)


RECORD_VALUES = ["Infinity", "-Infinity", "NaN", "1e400", str(2**63), str(2**64), "9" * 5000, '"12"', "[]", "{}",
                 "null", "-1", "0", '"\\ud800"', '"\\u001b]0;t\\u0007"', "true", "1e-400"]


def _postmortem_cases(w: _Writer) -> None:
    for field_ in ("current_steps", "total_steps", "loss", "lr", "epoch", "grad_norm", "percentage", "elapsed_time"):
        for value in RECORD_VALUES:
            lines = [_trainer_line(current_steps=s * 10) for s in range(1, 6)]
            lines.insert(3, _trainer_line().replace(f'"{field_}": ' + json.dumps(
                {"current_steps": 10, "total_steps": 100, "loss": 1.5, "lr": 1e-4, "epoch": 0.1, "percentage": 10.0,
                 "elapsed_time": "0:00:10"}.get(field_, None)), f'"{field_}": {value}') if field_ != "grad_norm"
                else _trainer_line()[:-1] + f', "grad_norm": {value}}}')
            p = w.file("trainer_log.jsonl", "\n".join(lines) + "\n")
            w.add(f"trainer_log {field_}={value[:16]}", 1, ["postmortem", os.path.dirname(p)])
    for field_ in ("step", "loss", "grad_norm", "epoch", "learning_rate"):
        for value in RECORD_VALUES:
            hist = [{"epoch": 0.1, "grad_norm": 1.0, "learning_rate": 1e-4, "loss": 1.5, "step": s * 10}
                    for s in range(1, 6)]
            hist[2][field_] = "__V__"
            text = json.dumps({"global_step": 50, "log_history": hist, "max_steps": 100}, indent=2)
            p = w.file("trainer_state.json", text.replace('"__V__"', value))
            w.add(f"trainer_state {field_}={value[:16]}", 1, ["postmortem", os.path.dirname(p)])
    for top in ("global_step", "max_steps", "log_history", "logging_steps"):
        for value in RECORD_VALUES:
            p = w.file("trainer_state.json", '{"global_step": 50, "max_steps": 100, "log_history": [], "%s": %s}'
                       % (top, value))
            w.add(f"trainer_state top {top}={value[:16]}", 2, ["postmortem", os.path.dirname(p)])
    big = {"global_step": 100_000, "max_steps": 100_000,
           "log_history": [{"epoch": s / 1e5, "grad_norm": 1.0, "learning_rate": 1e-4, "loss": 1.5 - s * 1e-6,
                            "step": s} for s in range(1, 100_001)]}
    p = w.file("trainer_state.json", json.dumps(big, indent=2))
    w.add("trainer_state 100k entries", 5, ["postmortem", os.path.dirname(p)])
    p = w.file("trainer_state.json", '{"log_history": ' + "[" * 100000 + "]" * 100000 + "}")
    w.add("trainer_state nesting 100000", 1, ["postmortem", os.path.dirname(p)])
    _log_cases(w)
    _special_file_cases(w)


LOG_LINES = [
    "{'loss': 0.8533, 'grad_norm': 4.869833469390869, 'learning_rate': 1.4516129032258065e-05, 'epoch': 0.16}",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.06 GiB is free.",
    "[rank0]:[E1123 00:52:57.664949121 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1516, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
    "milliseconds before timing out.",
    "[2025-03-02 10:00:04,001] [INFO] [loss_scaler.py:285:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
    "Attempted loss scale: 65536, reducing to 32768",
    "  2%|▏         | 10/620 [00:52<50:17,  4.95s/it]",
]


def _log_cases(w: _Writer) -> None:
    loss = LOG_LINES[0]
    for value in ("nan", "inf", "1e400", str(2**63), "9" * 5000, "-1e400", "'x'", "[1]", "None", "{}"):
        for metric in ("loss", "grad_norm", "learning_rate", "epoch"):
            line = loss.replace(f"'{metric}': ", f"'{metric}': {value}, 'x_{metric}': ", 1)
            p = w.file("train.log", "\n".join([loss] * 5 + [line] + [loss] * 3) + "\n")
            w.add(f"log {metric}={value[:12]}", 1, ["postmortem", os.path.dirname(p)])
    for s in ESC + ["\x00", "\x7f", "\u202e", "\ud800"]:
        for i, real in enumerate(LOG_LINES):
            p = w.file("train.log", "\n".join([loss, s + real + s, real]) + "\n")
            w.add(f"log escape {s!r} in line {i}", 6, ["postmortem", os.path.dirname(p)],
                  ["postmortem", os.path.dirname(p), "--format", "github"])
    trig = " ".join(LOG_LINES[1:4])
    for name, text in (("no newline 4MB", ("x" * 1000 + " CUDA out of memory. ") * 4000),
                       ("no newline triggers", trig * 2000), ("cr progress", "\r".join([LOG_LINES[4]] * 50000)),
                       ("one 8MB line", "a" * (8 << 20)), ("only newlines", "\n" * 1_000_000),
                       ("metric lines 200k", (loss + "\n") * 200_000)):
        p = w.file("train.log", text)
        w.add(f"log {name}", 5, ["postmortem", os.path.dirname(p)])
    for name, data in (("utf16", (loss + "\n").encode("utf-16")), ("latin1", b"caf\xe9 " + loss.encode() + b"\n"),
                       ("nul", b"\x00" * 100 + loss.encode()), ("empty", b""), ("bom", b"\xef\xbb\xbf" + loss.encode())):
        p = w.file("train.log", data)
        w.add(f"log encoding {name}", 4, ["postmortem", os.path.dirname(p)])
    for name, data in (("corrupt gz", b"\x1f\x8b\x08\x00garbage" * 10), ("truncated gz", gzip.compress(
            (loss + "\n").encode() * 1000)[:300]), ("empty gz", b""), ("gz bomb", gzip.compress(b"\n" * (64 << 20))),
                       ("gz of binary", gzip.compress(os.urandom(4096)))):
        p = w.file("train.log.gz", data)
        w.add(f"log {name}", 3, ["postmortem", os.path.dirname(p)], ["postmortem", os.path.dirname(p), "--log", p])
    for name, data in (("truncated event", b"\x18\x00\x00\x00\x00\x00\x00\x00\xa3\x7f\x4b\x22\x09\x00"),
                       ("event huge length", (2**63).to_bytes(8, "little") + b"\x00" * 12), ("event empty", b"")):
        p = w.file("events.out.tfevents.1700000000.host.1.0", data)
        w.add(f"tensorboard {name}", 3, ["postmortem", os.path.dirname(p)])


def _special_file_cases(w: _Writer) -> None:
    loss = LOG_LINES[0]
    for target_name in ("train.log", "trainer_log.jsonl", "trainer_state.json", "rank1.log", "stdout.log"):
        d = os.path.dirname(w.file("keep.log", loss + "\n"))
        os.mkfifo(os.path.join(d, target_name))
        w.add(f"FIFO as {target_name}", 3, ["postmortem", d], ["postmortem", d, "--log", os.path.join(d, target_name)])
        d = os.path.dirname(w.file("keep.log", loss + "\n"))
        os.symlink("/dev/zero", os.path.join(d, target_name))
        w.add(f"/dev/zero as {target_name}", 3, ["postmortem", d])
        d = os.path.dirname(w.file("keep.log", loss + "\n"))
        os.symlink(target_name, os.path.join(d, target_name))
        w.add(f"symlink loop as {target_name}", 3, ["postmortem", d])
        d = os.path.dirname(w.file("keep.log", loss + "\n"))
        os.mkdir(os.path.join(d, target_name))
        w.add(f"directory as {target_name}", 3, ["postmortem", d])
    d = os.path.dirname(w.file("keep.log", loss + "\n"))
    long = os.path.join(d, "x" * 300)
    deep = os.path.join(d, *(["y" * 200] * 25))
    loop = os.path.join(d, "loop")
    os.symlink("loop", loop)
    fifo = os.path.join(d, "fifo.yaml")
    os.mkfifo(fifo)
    good = os.path.join(d, "train.yaml")
    with open(good, "w") as fh:
        fh.write(BASE_YAML)
    for name, p in (("too-long name", long), ("too-long path", deep), ("symlink loop", loop), ("FIFO", fifo),
                    ("/dev/zero", "/dev/zero"), ("directory", d), ("missing", os.path.join(d, "none.yaml")),
                    ("/dev/null", "/dev/null")):
        w.add(f"path {name}", 3, ["lint", p], ["check", p, "--no-data", *GPU], ["estimate", p, *GPU],
              ["postmortem", p], ["postmortem", d, "--log", p], ["gpus", "--from", p], ["data", p, "--offline"],
              ["postmortem", d, "--config", p], ["estimate", good, "--model-config", p, *GPU],
              ["check", good, f"deepspeed={p}", "--no-data", *GPU])


CARD = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "bus_id": "00000000:18:00.0",
        "used_bytes": 62914560000, "total_bytes": 85520809984, "free_bytes": 22029533184, "util_gpu": 98,
        "temperature_c": 60, "power_w": 300.0, "processes": []}


def _gpus_cases(w: _Writer) -> None:
    head = json.dumps({"schema": "finetune-doctor/gpus-record/v1", "host": "node0", "interval_s": 1.0,
                       "started": 1717840800.0})
    for key in ("used_bytes", "total_bytes", "free_bytes", "index", "name", "util_gpu", "processes", "power_w"):
        for value in RECORD_VALUES:
            card = json.dumps({**CARD, key: "__V__"}).replace('"__V__"', value)
            snap = '{"time": 1717840800.0, "host": "node0", "cards": [%s]}' % card
            p = w.file("node0.jsonl", head + "\n" + snap + "\n")
            w.add(f"gpus card {key}={value[:16]}", 2, ["gpus", "--from", p])
    for key in ("time", "cards", "host"):
        for value in RECORD_VALUES:
            snap = ('{"time": 1717840800.0, "host": "node0", "cards": [%s]}' % json.dumps(CARD)).replace(
                f'"{key}": ', f'"{key}": {value}, "_{key}": ', 1)
            p = w.file("node0.jsonl", head + "\n" + snap + "\n")
            w.add(f"gpus snapshot {key}={value[:16]}", 2, ["gpus", "--from", p])
    many = {"time": 1717840800.0, "host": "node0", "cards": [{**CARD, "index": i, "uuid": f"GPU-{i}"}
                                                             for i in range(10_000)]}
    p = w.file("node0.jsonl", head + "\n" + json.dumps(many) + "\n")
    w.add("gpus 10k cards", 5, ["gpus", "--from", p])
    csv_head = "timestamp, index, name, memory.total [MiB], memory.used [MiB]\n"
    for name, text in (("csv truncated", csv_head + "2024/06/08 10:00:00.000, 0, NVIDIA A800"),
                       ("csv huge", csv_head + "2024/06/08 10:00:00.000, 0, A800, " + "9" * 5000 + " MiB, 1 MiB\n"),
                       ("csv inf", csv_head + "2024/06/08 10:00:00.000, 0, A800, inf MiB, nan MiB\n"),
                       ("csv escape", csv_head + "2024/06/08 10:00:00.000, 0, \x1b]0;t\x07, 81920 MiB, 1 MiB\n"),
                       ("csv empty", ""), ("csv header only", csv_head), ("text garbage", "\x00\x01\x02" * 100),
                       ("smi text escape", "| NVIDIA-SMI 535.104.05 \x1b[2J Driver Version: 535.104.05 |\n"),
                       ("utf16", csv_head.encode("utf-16")), ("deep json", "[" * 100000 + "]" * 100000),
                       ("json 1e400", '{"gpus": [{"memory": 1e400}]}')):
        ext = ".csv" if name.startswith("csv") else ".json" if "json" in name else ".txt"
        p = w.file("node0" + ext, text)
        w.add(f"gpus {name}", 1, ["gpus", "--from", p])
    for s in ESC:
        p = w.file("node0.jsonl", head + "\n" + json.dumps({"time": 1.0, "host": s, "cards": [{**CARD, "name": s}]})
                   + "\n")
        w.add(f"gpus escape {s!r}", 6, ["gpus", "--from", p], ["gpus", "--from", p, "--format", "github"])


def _data_cases(w: _Writer) -> None:
    row = {"instruction": "hi", "input": "", "output": "hello"}

    def folder(info: bytes | str, files: dict[str, bytes | str], klass: int, name: str) -> None:
        d = os.path.dirname(w.file("dataset_info.json", info))
        for fname, data in files.items():
            with open(os.path.join(d, fname), "wb") as fh:
                fh.write(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        cfg = os.path.join(d, "train.yaml")
        with open(cfg, "w") as fh:
            fh.write(BASE_YAML.replace("dataset: alpaca_en_demo", "dataset: ds") + f"dataset_dir: {d}\n")
        w.add(f"data {name}", klass, ["data", cfg, "--approximate", "--workers", "1", "--offline"],
              ["check", cfg, *GPU])

    good = json.dumps([row] * 4)
    for value in ('["d.json"]', "3", "null", '""', '"../../etc/passwd"', '"missing.json"', '{"a": 1}',
                  '"\\u001b]0;t\\u0007.json"', '"\\ud800.json"', '"' + "x" * 5000 + '"'):
        folder('{"ds": {"file_name": %s}}' % value, {"d.json": good}, 2, f"file_name={value[:16]}")
    for key in ("columns", "formatting", "tags", "ranking", "split", "num_samples", "subset"):
        for value in ('[]', '"x"', "3", "null", "1e400", '{"prompt": [1]}', str(2**63), "-1"):
            folder('{"ds": {"file_name": "d.json", "%s": %s}}' % (key, value), {"d.json": good}, 2,
                   f"info {key}={value[:10]}")
    for name, info in (("latin1", b'{"ds": {"file_name": "d.json", "x": "caf\xe9"}}'),
                       ("utf16", '{"ds": {"file_name": "d.json"}}'.encode("utf-16")), ("empty", b""),
                       ("list", b"[1]"), ("deep", b"[" * 100000 + b"]" * 100000), ("nul", b"\x00{}"),
                       ("truncated", b'{"ds": {"file_na')):
        folder(info, {"d.json": good}, 3 if name in ("latin1", "utf16") else 1, f"dataset_info {name}")
    for name, data in (("truncated json", good[:40]), ("deep rows", "[" * 100000 + "]" * 100000),
                       ("huge int", '[{"instruction": ' + "9" * 5000 + ', "output": "x"}]'),
                       ("surrogate", '[{"instruction": "\\ud800", "output": "x"}]'),
                       ("escape", json.dumps([{"instruction": "\x1b]0;t\x07", "output": "\x1b[2J"}])),
                       ("rows wrong", '[1, "x", null, [], {"output": [1]}]'), ("dict top", '{"a": 1}'),
                       ("one-line 20k rows", json.dumps([row] * 20_000)), ("utf16", good.encode("utf-16")),
                       ("latin1", '[{"instruction": "caf\xe9", "output": "x"}]'.encode("latin-1")),
                       ("empty", b""), ("nan", '[{"instruction": NaN, "output": Infinity}]')):
        folder('{"ds": {"file_name": "d.json"}}', {"d.json": data}, 3, f"rows {name}")
    parquet = open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "fixtures", "data", "alpaca.parquet"), "rb").read()
    for name, data in (("truncated parquet", parquet[: len(parquet) // 2]), ("parquet magic only", b"PAR1PAR1"),
                       ("parquet garbage", b"PAR1" + os.urandom(256) + b"PAR1"), ("parquet empty", b"")):
        folder('{"ds": {"file_name": "d.parquet"}}', {"d.parquet": data}, 3, name)
    for name, data in (("csv no header", ""), ("csv ragged", "instruction,output\n1,2,3,4\n\"unclosed\n"),
                       ("csv escape", "instruction,output\n\x1b]0;t\x07,x\n")):
        folder('{"ds": {"file_name": "d.csv"}}', {"d.csv": data}, 3, name)
    for name, data in (("jsonl bad line", '{"instruction": "a", "output": "b"}\n{oops\n'),
                       ("jsonl deep", "[" * 5000 + "]" * 5000 + "\n"), ("jsonl no newline 1MB", "x" * (1 << 20))):
        folder('{"ds": {"file_name": "d.jsonl"}}', {"d.jsonl": data}, 3, name)
    d = os.path.dirname(w.file("d.json", good))
    os.mkfifo(os.path.join(d, "fifo.json"))
    os.symlink("loop.json", os.path.join(d, "loop.json"))
    os.symlink("/dev/zero", os.path.join(d, "zero.json"))
    for fname in ("fifo.json", "loop.json", "zero.json"):
        info = os.path.join(d, f"info_{fname}")
        os.mkdir(info)
        with open(os.path.join(info, "dataset_info.json"), "w") as fh:
            fh.write('{"ds": {"file_name": "%s"}}' % os.path.join(d, fname))
        cfg = os.path.join(info, "train.yaml")
        with open(cfg, "w") as fh:
            fh.write(BASE_YAML.replace("dataset: alpaca_en_demo", "dataset: ds") + f"dataset_dir: {info}\n")
        w.add(f"data file {fname}", 3, ["data", cfg, "--approximate", "--workers", "1", "--offline"],
              ["check", cfg, *GPU])


def build(root: str) -> list[Case]:
    """Write the corpus under `root` (an empty folder) and return its cases, in a fixed order."""
    w = _Writer(root)
    for part in (_yaml_cases, _encoding_cases, _override_cases, _ds_cases, _model_cases, _postmortem_cases,
                 _gpus_cases, _data_cases):
        part(w)
    return w.cases
