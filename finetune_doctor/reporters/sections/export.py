"""Text rendering of ``sections["export"]`` (facts/kinds.py `export_estimate`): what a `llamafactory-cli export`
holds at its peak and where, as a table like the training memory table, then one line with the verdict against
the memory it runs in (host RAM for ``export_device: cpu``, the visible GPUs otherwise) and what it writes."""

from __future__ import annotations

from typing import Any


def _g(x: Any) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "—"


def render(data: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    cpu = data.get("device") == "cpu"
    where = "host RAM (export_device: cpu)" if cpu else "GPU memory over the visible GPUs"
    limit = data.get("host_ram_gib") if cpu else data.get("capacity_gib")
    t = Table(title=f"Merge peak in {where}", title_justify="left", box=None, pad_edge=False, show_footer=True)
    t.add_column("", footer="total at the peak")
    t.add_column("GiB", justify="right", footer=_g(data.get("peak_gib")))
    t.add_column("% of " + ("host RAM" if cpu else "GPUs"), justify="right",
                 footer=_pct(data.get("peak_gib"), limit))
    weights, merge = data.get("weights_gib"), data.get("merge_gib")
    t.add_row(f"weights ({data.get('params_b')} B params, {data.get('weights_format') or data.get('dtype')})", _g(weights), _pct(weights, limit))
    t.add_row("LoRA merge working set (5 % of the weights)", _g(merge), _pct(merge, limit))
    if data.get("adapter_params_b") is not None:
        # facts/exportadapter.py: the whole adapter sits in float32 beside the base model while it is merged
        how = f"rank {data.get('adapter_rank')}" + ("" if data.get("adapter_read") else " assumed: adapter-rank")
        t.add_row(f"LoRA adapter ({data['adapter_params_b']} B params, float32, {how})", _g(data.get("adapter_gib")),
                  _pct(data.get("adapter_gib"), limit))
    fits = {True: "yes", False: "NO", None: "unknown"}[data.get("fits")]
    if data.get("deciding") == "host-ram":
        # facts/kinds.py `_host_ram_verdict`: no host RAM given, the line it needs is the verdict
        fits = f"at-risk (needs {_g(data.get('host_ram_needed_gib'))} GiB of host RAM: host-ram assumption)"
    elif data.get("verdict") == "at-risk":
        lo, hi = data.get("interval_gib") or (data.get("peak_gib"), data.get("peak_gib"))
        fits = f"at-risk ({_g(lo)}-{_g(hi)} GiB over the {data.get('interval_of') or 'load-dtype'} assumption)"
    what = "host RAM" if cpu else "GPU memory"
    lim = f"{_g(limit)} GiB" if limit is not None else ("not given (--host-ram)" if cpu else "unknown (--gpu)")
    if not cpu and data.get("spill_gib"):
        # device_map="auto" puts what the GPUs do not hold in host RAM (facts/kinds.py `_export_places`)
        lim += f" + host RAM {_g(data.get('host_ram_gib'))} GiB (device_map auto spills {_g(data['spill_gib'])} GiB)"
    bits = data.get("quantized_bits")
    written = f"export_dir receives {_g(data.get('written_gib'))} GiB in {data.get('shards')} shard(s)" + (
        f", GPTQ {bits}-bit" if bits else "")
    out = [t, f"{what} {lim} · fits {fits} · {written}"]
    return out + ([data["no_probability"]] if data.get("no_probability") and data.get("fits") is not None else [])


def _pct(v: Any, limit: Any) -> str:
    if not isinstance(v, (int, float)) or not isinstance(limit, (int, float)) or not limit:
        return "—"
    return f"{100.0 * v / limit:.1f}%"
