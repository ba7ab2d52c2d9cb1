#!/usr/bin/env python
"""Benchmark ``doctor data`` against LLaMA-Factory-style preprocessing with ``datasets.map(batched=True)``.

Both sides tokenize the same generated alpaca JSON Lines file with the same tokenizer and the ``qwen`` template,
apply ``infer_seqlen`` at the same cutoff_len and use the same number of processes, in the same run:

* **baseline** — what LLaMA-Factory does (data/loader.py, converter.py, processor/supervised.py):
  ``load_dataset("json")``; ``Dataset.map(converter, batched=False, num_proc=N)`` to LF's ``_prompt/_response/...``
  columns; then ``Dataset.map(batched=True, batch_size=1000, num_proc=N)`` with a function that encodes every
  template slot with ``PreTrainedTokenizerFast.encode(slot, add_special_tokens=False)`` (LF's
  ``Template._convert_elements_to_ids``), truncates turn by turn with ``infer_seqlen`` and returns input_ids,
  attention_mask and labels. Written to the datasets cache, as in LF. The slot strings come from this project's
  template module (the same strings LF uses, verified by tests/test_data_lf_parity.py).
* **doctor** — ``finetune_doctor.pipeline.data.collect`` (streaming reader, chunks across worker processes,
  ``encode_batch`` per chunk, statistics).

The sum of the truncated lengths of the two sides must agree, so the speed-up is not bought with different work.
The doctor's peak memory (RSS of the main process and of its largest worker) is recorded too, at several file
sizes: streaming means it must not grow with the row count.

Usage::

    .venv/bin/python benchmarks/bench_data.py                  # 100k rows, both sides, 1M rows doctor-only
    .venv/bin/python benchmarks/bench_data.py --rows 20000 --memory-rows 0
    .venv/bin/python benchmarks/bench_data.py --big 1024       # 1 GB inputs: bounded memory, linear time

``--big MB`` (issue 17) generates, in a temporary folder that is removed afterwards, JSON Lines files of MB/4,
MB/2 and MB megabytes and scans each with the full doctor (fresh process, the tokenizer, all workers); then the
MB-sized data as a JSON array (one element per line, and all on one line), CSV, text and Parquet, read through
the row readers alone; then hostile shapes of that size: one JSON Lines row of MB megabytes, one JSON array
element of MB megabytes, a text file without a newline. Each line records seconds, CPU seconds of all processes
(wall time on a shared machine moves with the load) and peak RSS (main process VmHWM; largest worker). Results:
benchmarks/results/bench_data_big.md.

The tokenizer is a byte-level BPE with a 32k vocabulary trained here on the generated text (no downloads).
Results go to benchmarks/results/bench_data.md (appended) and are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "bench_data.md"

WORDS = ("the of and to in is that for it as with was on be by this are or from at which an have not but all "
         "they one their has more can will would there about if what so when up out into some them time only new "
         "model data training token batch memory gradient layer attention learning rate loss sequence length "
         "value function return list dict string number example answer question explain describe write summary "
         "because however therefore first second then finally result method system user assistant response "
         "你好 我们 数据 模型 训练 问题 回答 今天 天气 很好").split()


_VOCAB: list[str] = list(WORDS)
_CUM: list[float] | None = None


def use_zipf_vocabulary(n: int, seed: int = 5) -> None:
    """Draw words from WORDS plus `n` made-up ones with Zipf weights (rank^-1.07, as word frequencies in natural
    text fall off), instead of uniformly from WORDS: the doctor's per-piece count cache then misses as it would on
    real text with a large vocabulary, rather than almost never."""
    global _VOCAB, _CUM
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    made = {"".join(rng.choices(letters, k=rng.randint(2, 12))) for _ in range(n)}
    extra = sorted(made)
    rng.shuffle(extra)
    _VOCAB = list(WORDS) + [w.capitalize() if i % 9 == 0 else (w + str(i % 97) if i % 13 == 0 else w)
                            for i, w in enumerate(extra)]
    acc, _CUM = 0.0, []
    for r in range(1, len(_VOCAB) + 1):
        acc += r ** -1.07
        _CUM.append(acc)


def gen_text(rng: random.Random, n_words: int) -> str:
    words = rng.choices(_VOCAB, cum_weights=_CUM, k=n_words) if _CUM else rng.choices(WORDS, k=n_words)
    out, i = [], 0
    while i < len(words):
        k = rng.randint(6, 18)
        sent = " ".join(words[i:i + k])
        out.append(sent[:1].upper() + sent[1:] + rng.choice([".", ".", ".", "?", "!", ":\n-"]))
        i += k
    return " ".join(out)


def gen_rows(path: Path, n: int, seed: int = 7, short: bool = False) -> None:
    """Alpaca rows with a long-tailed length distribution (lognormal: median ~25 words of instruction and ~75 of
    response, a few thousand at most); `short` rows are ~5× smaller (for the million-row memory scan)."""
    rng = random.Random(seed)
    mq, ma = (1.8, 2.8) if short else (3.2, 4.3)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            q = max(3, int(rng.lognormvariate(mq, 0.8)))
            a = max(1, int(rng.lognormvariate(ma, 0.9)))
            row = {"instruction": gen_text(rng, q), "input": gen_text(rng, rng.choice([0, 0, 0, 20])),
                   "output": gen_text(rng, a)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def build_tokenizer(folder: Path, corpus_rows: int = 20000) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(1)
    corpus = [gen_text(rng, rng.randint(20, 200)) for _ in range(corpus_rows)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=32000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": None,
        "pad_token": None, "model_max_length": 1 << 20}))
    return folder


# --- baseline: LF-style preprocessing with datasets.map ----------------------------------------------------------

_B: dict = {}


def _tk():
    if "tk" not in _B:
        from transformers import PreTrainedTokenizerFast

        from finetune_doctor.analyzers.data import templates as T
        tk = PreTrainedTokenizerFast(tokenizer_file=str(Path(os.environ["BENCH_TOK"]) / "tokenizer.json"),
                                     eos_token="<|im_end|>")
        _B.update(tk=tk, t=T.get_template("qwen"), cutoff=int(os.environ["BENCH_CUTOFF"]))
    return _B["tk"], _B["t"], _B["cutoff"]


def _align(example: dict) -> dict:
    """LF's AlpacaDatasetConverter output columns (converter.py), one row at a time (map batched=False)."""
    query = [x for x in (example["instruction"], example["input"]) if x]
    return {"_prompt": [{"role": "user", "content": "\n".join(query)}],
            "_response": [{"role": "assistant", "content": example["output"]}],
            "_system": "", "_tools": "", "_images": None, "_videos": None, "_audios": None}


def _preprocess(batch: dict) -> dict:
    """LF's SupervisedDatasetProcessor.preprocess_dataset: every template slot encoded on its own with the
    transformers tokenizer (Template._convert_elements_to_ids), infer_seqlen per turn, ids and labels out."""
    from finetune_doctor.analyzers.data import templates as T
    from finetune_doctor.analyzers.data.dataargs import infer_seqlen

    tk, t, cutoff = _tk()
    out: dict = {"input_ids": [], "attention_mask": [], "labels": []}
    for prompt, response, system in zip(batch["_prompt"], batch["_response"], batch["_system"]):
        encoded = []
        for slots in T.message_slots(t, prompt + response, system, None):
            ids: list[int] = []
            for s in slots:
                if isinstance(s, str) and s:
                    ids += tk.encode(s, add_special_tokens=False)
            encoded.append(ids)
        input_ids, labels, total = [], [], 0
        for i in range(0, len(encoded), 2):
            if total >= cutoff:
                break
            ns, nt = infer_seqlen(len(encoded[i]), len(encoded[i + 1]), cutoff - total)
            total += ns + nt
            input_ids += encoded[i][:ns] + encoded[i + 1][:nt]
            labels += [-100] * ns + encoded[i + 1][:nt]
        out["input_ids"].append(input_ids)
        out["attention_mask"].append([1] * len(input_ids))
        out["labels"].append(labels)
    return out


def run_baseline(data: Path, tok_dir: Path, cutoff: int, procs: int, cache: Path) -> tuple[float, int]:
    os.environ["BENCH_TOK"], os.environ["BENCH_CUTOFF"] = str(tok_dir), str(cutoff)
    import datasets

    datasets.disable_progress_bars()
    t0 = time.perf_counter()
    ds = datasets.load_dataset("json", data_files=str(data), split="train", cache_dir=str(cache))
    kw = dict(num_proc=procs if procs > 1 else None, load_from_cache_file=False)
    ds = ds.map(_align, batched=False, remove_columns=ds.column_names, **kw)           # LF align_dataset
    ds = ds.map(_preprocess, batched=True, batch_size=1000, remove_columns=ds.column_names, **kw)  # LF processor
    total = sum(len(x) for x in ds["input_ids"])
    return time.perf_counter() - t0, total


def run_floor(data: Path, tok_dir: Path) -> float:
    """The tokenizer alone: ``encode_batch_fast`` of the qwen slot texts of every row (1000 rows per call, rayon
    on all cores), with no reading, conversion or statistics — the least any exact counter must spend."""
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    system = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    rows = [json.loads(line) for line in open(data, encoding="utf-8")]
    texts = []
    for r in rows:
        q = "\n".join(x for x in (r["instruction"], r["input"]) if x)
        texts += [system, "<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n", r["output"] + "<|im_end|>\n"]
    t0 = time.perf_counter()
    for i in range(0, len(texts), 3000):
        tk.encode_batch_fast(texts[i:i + 3000], add_special_tokens=False)
    return time.perf_counter() - t0


def run_doctor(data: Path, tok_dir: Path, cutoff: int, procs: int) -> tuple[float, dict]:
    from finetune_doctor.analyzers.data.datascan import collect

    (data.parent / "dataset_info.json").write_text(json.dumps({"bench": {"file_name": data.name}}))
    cfg = {"model_name_or_path": str(tok_dir), "dataset": "bench", "dataset_dir": str(data.parent),
           "template": "qwen", "cutoff_len": cutoff, "per_device_train_batch_size": 4}
    t0 = time.perf_counter()
    facts = collect(cfg, str(data.parent / "cfg.yaml"), workers=procs, strict=True)
    return time.perf_counter() - t0, facts


def memory_probe(data: Path, tok_dir: Path, cutoff: int, procs: int) -> dict:
    """Run the doctor in a fresh process and report its peak RSS and its largest worker's (MiB).

    The main process's peak is VmHWM from /proc (reset at exec); ru_maxrss would still carry the size of this
    benchmark process, which the probe was forked from. The workers are forked from the small probe process, so
    RUSAGE_CHILDREN's ru_maxrss is theirs.
    """
    code = (
        "import json,resource,sys,time; sys.path.insert(0, %r)\n"
        "from benchmarks.bench_data import run_doctor\nfrom pathlib import Path\n"
        "t,f=run_doctor(Path(%r),Path(%r),%d,%d)\n"
        "hwm=next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "print(json.dumps({'seconds':t,'rows':f['overall']['rows'],'self_mib':hwm/1024,"
        "'worker_mib':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024}))\n"
        % (str(ROOT), str(data), str(tok_dir), cutoff, procs))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


BIG_RESULTS = RESULTS.parent / "bench_data_big.md"
_PROBE = ("import json,resource,sys,time; sys.path.insert(0, %r)\n{body}\n"
          "hwm=next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
          "ru=[resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]\n"
          "print(json.dumps({'seconds':t,'rows':n,'bad':bad,'self_mib':hwm/1024,"
          "'cpu':sum(r.ru_utime+r.ru_stime for r in ru),"
          "'worker_mib':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024}))\n")


def _fresh(body: str) -> dict:
    out = subprocess.run([sys.executable, "-c", (_PROBE % str(ROOT)).replace("{body}", body)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def read_probe(path: Path, ftype: str) -> dict:
    """The row readers alone over `path` in a fresh process: rows, rows with problems, seconds, peak RSS."""
    return _fresh(
        "from finetune_doctor.readers.data.datasets import DatasetSpec, iter_chunks\n"
        f"spec=DatasetSpec(name='b', load_from='file', source='x', files=({str(path)!r},), file_type={ftype!r})\n"
        "t0=time.perf_counter(); n=bad=0\n"
        "for ch in iter_chunks(spec):\n    n+=len(ch); bad+=len(ch.errors)\n"
        "t=time.perf_counter()-t0")


def scan_probe(path: Path, tok_dir: Path, cutoff: int, procs: int) -> dict:
    return _fresh(
        "from benchmarks.bench_data import run_doctor\nfrom pathlib import Path\n"
        f"t,f=run_doctor(Path({str(path)!r}),Path({str(tok_dir)!r}),{cutoff},{procs})\n"
        "n=f['overall']['rows']; bad=len(f['problems'])")


def _repeat_to(block: Path, out: Path, size: int) -> None:
    data = block.read_bytes()
    with open(out, "wb") as f:
        while f.tell() < size:
            f.write(data)


def _convert(jsonl: Path, out: Path, kind: str) -> None:
    """The rows of `jsonl` as a JSON array (``array``, one element per line; ``oneline``), CSV or text."""
    import csv

    with open(jsonl, encoding="utf-8") as src, open(out, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f) if kind == "csv" else None
        if w:
            w.writerow(["instruction", "input", "output"])
        sep = "\n" if kind == "array" else ""
        for i, line in enumerate(src):
            row = json.loads(line)
            if w:
                w.writerow([row["instruction"], row["input"], row["output"]])
            elif kind == "text":
                f.write(row["output"].replace("\n", " ") + "\n")
            else:
                f.write(("[" if i == 0 else ",") + sep + line.rstrip("\n"))
        if kind in ("array", "oneline"):
            f.write(sep + "]")


def _to_parquet(jsonl: Path, out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    with open(jsonl, encoding="utf-8") as src:
        while True:
            rows = [json.loads(x) for _, x in zip(range(100_000), src)]
            if not rows:
                break
            t = pa.Table.from_pylist(rows)
            writer = writer or pq.ParquetWriter(str(out), t.schema)
            writer.write_table(t)   # one row group of 100,000 rows (~100 MB) per call
    writer.close()


def _hostile(work: Path, size: int) -> list[tuple[str, Path, str]]:
    out = []
    p = work / "one_row.jsonl"
    with open(p, "w") as f:
        f.write('{"instruction": "')
        for _ in range(size >> 20):
            f.write("x" * (1 << 20))
        f.write('", "output": "y"}\n{"instruction": "a", "output": "b"}\n')
    out.append(("JSON Lines, one row of the whole size, then a small row", p, "json"))
    q = work / "one_element.json"
    with open(q, "w") as f:
        f.write('[{"instruction": "a", "output": "b"}, {"instruction": "')
        for _ in range(size >> 20):
            f.write("x\\\"" * (1 << 18))
        f.write('", "output": "y"}, {"instruction": "c", "output": "d"}]')
    out.append(("JSON array, one element of the whole size between two small ones", q, "json"))
    r = work / "no_newline.txt"
    with open(r, "w") as f:
        for _ in range(size >> 20):
            f.write("word " * ((1 << 20) // 5))
    out.append(("text without a newline", r, "text"))
    return out


def big_main(args: argparse.Namespace) -> int:
    """--big: bounded RSS and linear time on inputs of `args.big` MB (see the module docstring)."""
    work = Path(tempfile.mkdtemp(prefix="bench_data_big_"))
    try:
        tok_dir = build_tokenizer(work / "tok")
        block = work / "block.jsonl"
        gen_rows(block, 64_000)          # ~64 MB, repeated to each size
        size = args.big << 20
        lines = [f"## {time.strftime('%Y-%m-%d %H:%M')} — {platform.node() or 'host'}, {os.cpu_count()} cores, "
                 f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}", "",
                 f"Full scans (tokenizer, template qwen, cutoff_len {args.cutoff}, {args.procs} processes) of JSON "
                 f"Lines files made of a {block.stat().st_size / 1e6:.0f} MB block of generated alpaca rows:", "",
                 "| file MB | rows | seconds | CPU seconds (all processes) | CPU s per GB | main RSS MiB | "
                 "largest worker MiB |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for mb in (args.big // 4, args.big // 2, args.big):
            p = work / f"scan_{mb}.jsonl"
            _repeat_to(block, p, mb << 20)
            m = scan_probe(p, tok_dir, args.cutoff, args.procs)
            gb = p.stat().st_size / 2**30
            lines.append(f"| {p.stat().st_size / 1e6:,.0f} | {m['rows']:,} | {m['seconds']:.1f} | {m['cpu']:.1f} | "
                         f"{m['cpu'] / gb:.1f} | {m['self_mib']:.0f} | {m['worker_mib']:.0f} |")
            print(lines[-1], flush=True)
            if mb != args.big:
                p.unlink()
        big = work / f"scan_{args.big}.jsonl"
        lines += ["", f"Row readers alone on {args.big:,} MB of the same rows in each format, and hostile shapes:", "",
                  "| input | file MB | rows | rows with problems | seconds | CPU s per GB | RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        inputs = [("JSON Lines", big, "json")]
        for kind, name, ftype in (("array", "a.json", "json"), ("oneline", "o.json", "json"), ("csv", "c.csv", "csv"),
                                  ("text", "t.txt", "text")):
            _convert(big, work / name, kind)
            inputs.append(({"array": "JSON array, one element per line", "oneline": "JSON array on one line",
                            "csv": "CSV", "text": "text"}[kind], work / name, ftype))
        _to_parquet(big, work / "p.parquet")
        inputs.append(("Parquet, row groups of 100,000 rows", work / "p.parquet", "parquet"))
        inputs += _hostile(work, size)
        for what, path, ftype in inputs:
            m = read_probe(path, ftype)
            gb = path.stat().st_size / 2**30
            lines.append(f"| {what} | {path.stat().st_size / 1e6:,.0f} | {m['rows']:,} | {m['bad']:,} | "
                         f"{m['seconds']:.1f} | {m['cpu'] / gb:.1f} | {m['self_mib']:.0f} |")
            print(lines[-1], flush=True)
            path.unlink()
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_record:
        head = "" if BIG_RESULTS.exists() else (
            "# doctor data on 1 GB inputs — peak memory and time per GB\n\n"
            "Produced by `benchmarks/bench_data.py --big 1024`; newest run last. Inputs are generated in a temporary "
            "folder and removed.\n\n")
        with open(BIG_RESULTS, "a", encoding="utf-8") as f:
            f.write(head + text + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows for the speed comparison")
    ap.add_argument("--memory-rows", type=int, default=1_000_000, help="largest file for the memory scan (0: skip)")
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved doctor/baseline pairs (median reported)")
    ap.add_argument("--short", action="store_true", help="~200-byte rows instead of ~900-byte rows")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--zipf", type=int, default=0, metavar="N",
                    help="draw words Zipf-distributed from a vocabulary of N made-up words plus the built-in ones")
    ap.add_argument("--big", type=int, default=0, metavar="MB",
                    help="bounded memory and linear time on MB-sized inputs instead of the speed comparison")
    args = ap.parse_args()
    if args.big:
        return big_main(args)
    work = Path(tempfile.mkdtemp(prefix="bench_data_"))
    tok_dir = build_tokenizer(work / "tok")
    data = work / "bench.jsonl"
    if args.zipf:
        use_zipf_vocabulary(args.zipf)
    gen_rows(data, args.rows, short=args.short)
    size_mb = data.stat().st_size / 1e6

    # interleaved repeats: on a shared machine the load drifts, so each ratio compares neighbouring runs
    pairs = []
    for _ in range(args.repeat):
        t_doc, facts = run_doctor(data, tok_dir, args.cutoff, args.procs)
        t_base, base_total = run_baseline(data, tok_dir, args.cutoff, args.procs, work / "hf_cache")
        t_floor = run_floor(data, tok_dir)
        pairs.append((t_base, t_doc, os.getloadavg()[0], t_floor))
    ov = facts["overall"]
    doc_total = ov["tokens_trained"]
    same = doc_total == base_total
    ratios = sorted(p[0] / p[1] for p in pairs)
    ratio = ratios[len(ratios) // 2]
    t_base = sorted(p[0] for p in pairs)[len(pairs) // 2]
    t_doc = sorted(p[1] for p in pairs)[len(pairs) // 2]
    t_floor = sorted(p[3] for p in pairs)[len(pairs) // 2]
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M')} — {platform.node() or 'host'}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "",
        f"Data: {args.rows:,} generated alpaca rows ({'short, ' if args.short else ''}"
        f"{f'Zipf words over a {len(_VOCAB):,}-word vocabulary, ' if args.zipf else ''}{size_mb:.1f} MB JSON Lines, "
        f"{1e6 * size_mb / args.rows:.0f} bytes per row), template qwen, cutoff_len "
        f"{args.cutoff}, byte-level BPE 32k, {args.procs} processes on both sides.",
        "",
        "| side | seconds (median) | rows/s | tokens after truncation |",
        "|---|---:|---:|---:|",
        f"| baseline: LF-style datasets.map (align, then batched preprocess) | {t_base:.2f} | "
        f"{args.rows / t_base:,.0f} | {base_total:,} |",
        f"| doctor data (collect) | {t_doc:.2f} | {args.rows / t_doc:,.0f} | {doc_total:,} |",
        f"| tokenizer alone: encode_batch_fast of the same slot texts, no reading or statistics | {t_floor:.2f} | "
        f"{args.rows / t_floor:,.0f} | |",
        "",
        f"**Speed-up: {ratio:.2f}×** (median of {len(pairs)} interleaved pairs: "
        f"{', '.join(f'{r:.2f}' for r in ratios)}; load average during the pairs "
        f"{', '.join(f'{p[2]:.1f}' for p in pairs)}; goal ≥ 3×). Same token total on both sides: {same}. "
        f"p50/p99/max total tokens: {ov['total']['p50']}/{ov['total']['p99']}/{ov['total']['max']}, "
        f"truncated {ov['truncated']:,}. Against the tokenizer alone: baseline {t_base / t_floor:.2f}×, doctor "
        f"{t_doc / t_floor:.2f}× its time.",
        "",
    ]
    if args.memory_rows:
        lines += ["Peak memory of the doctor on short rows (~200 bytes; fresh process per size; RSS in MiB):", "",
                  "| rows | file MB | seconds | rows/s | main process | largest worker |", "|---:|---:|---:|---:|---:|---:|"]
        sizes = sorted({max(1000, args.memory_rows // 10), args.memory_rows})
        for n in sizes:
            p = work / f"mem_{n}.jsonl"
            gen_rows(p, n, seed=11, short=True)
            m = memory_probe(p, tok_dir, args.cutoff, args.procs)
            assert m["rows"] == n, m
            lines.append(f"| {n:,} | {p.stat().st_size / 1e6:.0f} | {m['seconds']:.1f} | {n / m['seconds']:,.0f} | "
                         f"{m['self_mib']:.0f} | {m['worker_mib']:.0f} |")
            p.unlink()
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        head = "" if RESULTS.exists() else ("# doctor data — speed against datasets.map and memory\n\n"
                                             "Produced by benchmarks/bench_data.py; newest run last.\n\n")
        with open(RESULTS, "a", encoding="utf-8") as f:
            f.write(head + text + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
