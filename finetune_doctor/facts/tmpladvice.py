"""The chat template a reasoning model wants, judged for the LLaMA-Factory release(s) the config is judged for
(the ``lint.reasoning_template`` fact, rule plain-template-on-reasoning-model FD020).

Facts:

* DeepSeek-R1 and the ``DeepSeek-R1-Distill-*`` models speak DeepSeek's chat format whatever their base (Llama,
  Qwen): their tokenizer_config's chat template writes ``<｜User｜>``/``<｜Assistant｜>`` turns and opens a
  ``<think>`` block (huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Llama-8B). LLaMA-Factory renders that format as
  ``deepseek3`` (plain) and, from 0.9.3, ``deepseekr1`` (the same turns as a ReasoningTemplate) — the registering
  releases are catalog/lf_releases.json ``templates``. LLaMA-Factory's own model list registers the R1 distills
  (Llama-8B, Qwen-7B, ...) with ``template="deepseek3"`` at 0.9.2 (extras/constants.py:554) and
  ``template="deepseekr1"`` at 0.9.4 (extras/constants.py:605); before 0.9.3 ``deepseek3`` is the template to use
  (hiyouga in LlamaFactory#6853, asked llama3 or deepseek3 for R1-Distill-Llama-8B: "deepseek3").
* A ``-Thinking`` checkpoint under a ``<name>_nothink`` template wants ``<name>`` (each ``_nothink`` is the plain
  sibling of a reasoning template, LF data/template.py).

* A Qwen3-VL checkpoint wants ``qwen3_vl`` (``-Thinking``) or ``qwen3_vl_nothink`` (Instruct): their multimodal
  plugin is ``qwen3_vl`` (data/template.py:2033-2062 at 0.9.4, :2091-2120 at 0.9.5; LF's model list registers
  Qwen3-VL Instruct with ``qwen3_vl_nothink``, extras/constants.py:3136 at 0.9.5); ``qwen2_vl`` formats images with
  the Qwen2-VL plugin, another processor (LlamaFactory#9458: "Processor was not found"). No release before 0.9.4
  registers a Qwen3-VL template (`template_mismatch`).

A suggestion is made only where a judged release registers it; ``registered`` says whether every judged release
does (True), some do (None: a development build between two releases, or no version given) or none (False).
"""

from __future__ import annotations

from typing import Any, Mapping

NOTHINK = ("qwen3_nothink", "qwen3_vl_nothink", "qwen3_5_nothink")


def _registered(release: Any, name: str) -> bool | None:
    if release is None:
        return None
    vs = release.template_versions(name)
    judged = list(release.versions)
    have = [v for v in judged if v in vs]
    if not have:
        return False
    return True if len(have) == len(judged) and release.known else None


def reasoning_template(values: Mapping[str, Any], release: Any) -> dict[str, Any] | None:
    """{template, want, problem: 'plain' | 'format', registered, first, releases} for a reasoning model whose
    template is not the one it wants (module docstring), or None."""
    name = str(values.get("model_name_or_path") or "").lower()
    tmpl = values.get("template")
    if not isinstance(tmpl, str) or not tmpl or values.get("stage") == "pt":
        return None   # pre-training reads plain text: the chat template formats no turns there
    first = None
    if "deepseek-r1" in name or "r1-distill" in name:
        r1 = _registered(release, "deepseekr1")
        if tmpl == "deepseekr1":
            return None
        if tmpl == "deepseek3":
            if r1 is False:
                return None   # the release has no reasoning template for this format: deepseek3 is the one
            want, problem = "deepseekr1", "plain"
        else:
            want, problem = ("deepseekr1" if r1 is not False else "deepseek3"), "format"
        first = (release.template_versions(want) or [None])[0] if release is not None else None
        reg = True if want == "deepseek3" and r1 is False else r1
        note = "no_reasoning" if want == "deepseek3" else ("may_predate" if reg is None else "none")
        return {"template": tmpl, "want": want, "problem": problem, "registered": reg, "note": note,
                "first": first, "releases": _label(release)}
    if tmpl in NOTHINK and "thinking" in name:
        want = tmpl[: -len("_nothink")]
        reg = _registered(release, want)
        if reg is False:
            return None
        first = (release.template_versions(want) or [None])[0] if release is not None else None
        return {"template": tmpl, "want": want, "problem": "plain", "registered": reg,
                "note": "may_predate" if reg is None else "none", "first": first, "releases": _label(release)}
    return None


def _label(release: Any) -> str:
    if release is None or not release.known:
        return "any release"
    vs = list(release.versions)
    return vs[0] if len(vs) == 1 else f"{vs[0]}-{vs[-1]}"


def template_mismatch(values: Mapping[str, Any], release: Any) -> dict[str, Any] | None:
    """{template, want, model, registered, first, releases} for a Qwen3-VL checkpoint under a template of another
    model generation (module docstring), or None."""
    name = str(values.get("model_name_or_path") or "").lower()
    tmpl = values.get("template")
    if not isinstance(tmpl, str) or "qwen3-vl" not in name or tmpl.startswith("qwen3_vl") or values.get("stage") == "pt":
        return None
    want = "qwen3_vl" if "thinking" in name else "qwen3_vl_nothink"
    reg = _registered(release, want)
    first = (release.template_versions(want) or [None])[0] if release is not None else None
    return {"template": tmpl, "want": want, "model": "Qwen3-VL", "registered": reg,
            "registration": {True: "all", None: "some", False: "none"}[reg], "first": first,
            "releases": _label(release)}


def export_merge_quantized(values: Mapping[str, Any], kind: str) -> str | None:
    """Which key makes an export merge an adapter into a quantized model ('quantization_bit'), or merge and GPTQ-
    quantize in one run ('export_quantization_bit'), refused by LLaMA-Factory's export_model (train/tuner.py:79 at
    0.8.3/0.9.0, :122 at 0.9.2, :135-145 at 0.9.4, :168 at 0.9.5); None otherwise (rule export-merge-into-quantized)."""
    if kind != "export" or not values.get("adapter_name_or_path"):
        return None
    if values.get("quantization_bit") is not None:
        return "quantization_bit"
    if values.get("export_quantization_bit") is not None:
        return "export_quantization_bit"
    return None


def ref_model_fix_state(release: Any) -> str:
    """How many judged LLaMA-Factory releases prepare a DPO/KTO reference model for FSDP: the FSDP/FSDP2 branch
    of LF PR #10127 (merged 2026-01-22, in 0.9.5: train/dpo/trainer.py:95-109; absent at 0.9.4,
    train/dpo/trainer.py:94-102, and before). 'none', 'some' (a 0.9.5 development build judged by 0.9.4 and 0.9.5),
    'all', or 'unknown' (no version read). The facts: analyzers/postmortem/refmodel.py."""
    if release is None or not release.known or getattr(release, "older", False):
        return "unknown" if release is None or not release.known else "none"
    from finetune_doctor.numbers import version_key

    fixed = [v for v in release.versions if (version_key(v) or ((0,), 0)) >= (version_key("0.9.5") or ((0,), 0))]
    return "all" if len(fixed) == len(release.versions) else ("some" if fixed else "none")
