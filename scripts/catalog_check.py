"""Check the bundled model catalog: computed parameter counts against published ones and against transformers.

For every entry of ``finetune_doctor/catalog/models.json`` this prints ``ModelArch.total_params()`` next to
``published_params`` (and ``published_exact`` where the entry has one) and, for model types transformers ships
itself, ``sum(p.numel())`` of the model built from the same config on the meta device (no memory, no download).
Remote-code families (qwen, baichuan, chatglm, internlm2) show "-" in that column.

    python scripts/catalog_check.py            # table, exit 1 on any mismatch
    python scripts/catalog_check.py --markdown # the same as a markdown table
"""

from __future__ import annotations

import argparse
import sys
import time

from finetune_doctor.readers.model.catalog import resolve_entry
from finetune_doctor.readers.modelcfg import catalog_arch, catalog_entries

_WRAPPERS = {"gemma3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"}


def meta_count(cfg: dict) -> int | None:
    """Parameters of the transformers model built from `cfg` on the meta device; None when transformers has no
    class for its model_type (remote-code models)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mt = cfg["model_type"]
    if mt not in CONFIG_MAPPING:
        return None
    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    config = AutoConfig.for_model(mt, **kwargs)
    auto = AutoModelForImageTextToText if mt in _WRAPPERS else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--no-transformers", action="store_true", help="skip the meta-device builds")
    args = ap.parse_args(argv)
    bad = 0
    rows = []
    t0 = time.time()
    for e in catalog_entries():
        arch = catalog_arch(e)
        total = arch.total_params()
        pub = e.get("published_params") or arch.published_params
        if not pub:
            continue
        err = (total / 1e9 - pub) / pub * 100
        exact = e.get("published_exact")
        meta = None if args.no_transformers else meta_count(resolve_entry(e)[0])
        ok = abs(err) <= 1.0 and (exact is None or exact == total) and (meta is None or meta == total)
        bad += not ok
        rows.append((e["id"], total, pub, err, exact, meta, ok))
    if args.markdown:
        print("| model | computed | published (B) | error | published exact | transformers meta | ok |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for i, t, p, er, ex, m, ok in rows:
            print(f"| {i} | {t:,} | {p} | {er:+.3f}% | {'' if ex is None else f'{ex:,}'} | "
                  f"{'-' if m is None else f'{m:,}'} | {'yes' if ok else 'NO'} |")
    else:
        for i, t, p, er, ex, m, ok in rows:
            print(f"{i:40s} {t:>17,} {p:>9} {er:+7.3f}%  exact={'-' if ex is None else ('=' if ex == t else ex)}"
                  f"  meta={'-' if m is None else ('=' if m == t else m)}  {'ok' if ok else 'MISMATCH'}")
    print(f"{len(rows)} entries, {bad} mismatches, {time.time() - t0:.1f} s", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
