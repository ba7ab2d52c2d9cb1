"""General kinds of failure a short report states in words or one line, beyond its symptom (issue #25, round 8's
dev misses read by kind, never by their text).

Each kind is a mechanism many reports share, read from how users phrase it, and made into the lead of the words
finding (``ev.said.lead``, analyzers/postmortem/said.py) or into what an exception's text establishes
(``ev.crash.cause``, crashcause.py):

- **an upgrade that broke the run** ("after updating trl to the latest it errors", "works with peft 0.10, fails
  with 0.11", "升级 transformers 后报错"): the newer release of the package the words name, not the run's data or
  config; the release that worked is named when the words give it.
- **a source checkout** ("fails on the main branch", "installed from source", "最新代码"): code newer than any
  release, written against other releases of its dependencies than the ones installed.
- **an MoE model that hangs under ZeRO-2 or DDP as well** ("Mixtral hangs with ZeRO-2", "MoE 用 zero2 卡住"): ZeRO-1/2
  and DDP keep every parameter whole, so ZeRO-3's expert gathers do not explain it; an MoE block that skips the
  experts no token reached (the loop over ``expert_hit``, transformers 5.6.0 models/qwen3_moe/
  modeling_qwen3_moe.py:237-239) leaves, where each expert is a module of its own (transformers 4.x), gradients
  on some ranks and not others; 5.x packs the experts into one parameter (:215-224, PR #41580).
- **a crash at the end of training** ("crashes at the end of training if the base model is local"): what runs
  after the loop — the final save, the model card and Hub look-ups of the base model, push_to_hub; a local path
  given where a Hub repo id is looked up fails huggingface_hub's id validation (HFValidationError, "Repo id must
  be in the form 'repo_name' or 'namespace/repo_name'", huggingface_hub utils/_validators.py validate_repo_id).
- **a resumed run that trains nothing** ("resume_from_checkpoint then training ends immediately", "断点续训直接
  结束"): HF's Trainer restores the checkpoint's global_step and skips the epochs and batches already trained
  (transformers trainer.py ``_inner_training_loop``: "Continuing training from global step", "Will skip the
  first N epochs"), so a checkpoint already at the run's last step leaves no step to run.
- **a model named with a crash and no traceback** ("Qwen3.5 SFT 训练报错"): the transformers release against the
  model type — older than the first release that registers it (catalog/tf_model_types.json, each row sourced,
  read by facts/loadfail.py `said_type_need`; this module gives the family as users write it, `family_type`)
  does not recognise it, and the first releases carrying a new type are the ones whose bugs later patch
  releases fix.
- **an engine on though the user turned it off** ("FSDP is still enabled even though fsdp is false", "明明关闭了
  deepspeed 还是启用了"): the launcher's own config, most often accelerate's default config.
- **FSDP's auto wrap finding no layer class** (accelerate utils/dataclasses.py ``set_auto_wrap_policy``: "Could not
  find the transformer layer class to wrap in the model."): the class named is not one of the model's, and where
  FSDP was never asked for, accelerate's default config (``$HF_HOME/accelerate/default_config.yaml``, written by
  an earlier ``accelerate config``; accelerate commands/config/config_args.py) turned it on.
- **a dtype mismatch inside a layer** (ATen's "expected scalar type Float but found BFloat16"/"Half"): an input
  and a weight of one op in different dtypes; when it follows whatever precision flag is set, the model's
  placement is the lead — a plain ``python`` launch with several visible GPUs lets ``device_map="auto"`` spread
  the model over them (LLaMA-Factory's non-distributed path), with casts that differ per device.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.readers.runlogs.userwords_vocab import ENGINE_ON_ANYWAY, RESUME_ENDED

_I = re.I | re.A

_PKG = (r"(?:torch|pytorch|transformers|deepspeed|peft|accelerate|trl|vllm|datasets|flash[-_]?attn|bitsandbytes|"
        r"xformers|unsloth|triton|numpy|tokenizers|safetensors|ms-swift|swift|llamafactory|axolotl)")
_VER = r"v?\d+(?:\.\d+)+(?:\.?(?:dev|rc|post)\d*)?"

# an upgrade said before a failure: English (after/since updating, upgraded to, a release that works and one that
# fails) and Chinese (更新/升级 ... 后 报错, 更新到最新版本报错)
UPGRADE = re.compile(
    r"\b(?:after|since|once|when)\s+(?:i\s+|we\s+)?(?:upgrad\w*|updat\w*|bump\w*)\b|"
    r"\b(?:upgraded|updated|bumped)\s+(?:the\s+)?" + _PKG + r"\b|"
    r"\b" + _PKG + r"\s+(?:was\s+|got\s+|is\s+)?(?:upgraded|updated|bumped)\b|"
    r"\b(?:upgrad\w*|updat\w*)\s+(?:\w+\s+){0,2}?to\s+(?:the\s+)?(?:latest|newest|new(?:er)?)\b|"
    r"\b(?:works?|worked|working)\s+(?:fine\s+|well\s+)?(?:with|on|in|under)\s+" + _PKG + r"\s*(?:==|=)?\s*" + _VER
    + r"[^.\n]{0,60}?\b(?:but|while|fails?|failed|breaks?|broke|broken|errors?)\b|"
    r"(?:更新|升级)(?:了|到|至|成)?[^，,。；;\n]{0,40}?(?:后|之后|以后)?\S{0,4}?(?:就|又|开始)?(?:报错|出错|失败|不行|挂了|有问题|异常)|"
    r"(?:更新|升级)(?:了|到|至)?最新|"
    # (appended, wt/pmrobust13) the release that worked said first, the newest said to fail after it ("trl 0.15.0
    # was fine, the newest trl gives an error", "0.15.0 没问题，最新版报错")
    r"\b" + _PKG + r"\s*(?:==|=)?\s*" + _VER + r"\s+(?:was|is|works?|worked|ran)\s+(?:fine|ok|okay|good|well)\b"
    r"[^.\n]{0,60}?\b(?:latest|newest|new(?:er)?)\b|"
    r"(?:没问题|正常|可以)[^。\n]{0,30}?(?:最新|新版)\S{0,10}?(?:报错|出错|失败|不行)", _I)
# a release named as the one that worked ("一开始用的是 trl==0.15.0", "worked with peft 0.10.0", "0.15.0 was fine")
_WORKED = re.compile(r"(?:一开始|之前|原来|起初|最初|以前)[^，,。；;\n]{0,12}?(?P<p1>" + _PKG + r")\s*(?:==|=)?\s*(?P<v1>" + _VER
                     + r")|\b(?:works?|worked|working|was fine|fine)\s+(?:fine\s+|well\s+)?(?:with|on|in|under)\s+"
                     r"(?P<p2>" + _PKG + r")\s*(?:==|=)?\s*(?P<v2>" + _VER + r")|\b(?P<p3>" + _PKG + r")\s*(?:==|=)?\s*"
                     r"(?P<v3>" + _VER + r")\s+(?:works?|worked|was fine|is fine)\b", _I)
_NAMED_PKG = re.compile(r"\b" + _PKG + r"\b", _I)

# a source checkout: the main/master/dev branch, an install from source or git, 最新代码/源码
SOURCE = re.compile(
    r"\b(?:on|from|with|using|in)\s+(?:the\s+)?(?:latest\s+)?(?:main|master|dev(?:elop)?)(?:\s+branch)?\b(?=[^.\n]{0,3}"
    r"(?:$|[\s,.;:)]))|\b(?:main|master)\s+branch\b|"
    r"\b(?:installed|install|built|building)\s+from\s+(?:source|git|github)\b|"
    r"\bgit\s+(?:clone|pull)\b|\bpip install git\+|\bsource (?:checkout|install)\b|main\s*分支|(?:最新的?|拉取的?)(?:代码|源码)|"
    r"源码(?:安装|编译)", _I)

# a local model path or the words for one
_LOCAL = re.compile(r"\blocal(?:ly)?\b|本地|\blocal (?:path|folder|directory|dir|model|base model)\b|"
                    r"(?:^|\s)(?:/|\./|~/)[\w.-]+/|[A-Za-z]:\\", _I)

# a model family in words, most specific first: (pattern, model_type of catalog/tf_model_types.json). Qwen1.5 and
# Qwen2.5 checkpoints carry model_type qwen2 (their config.json), Qwen2.5-VL qwen2_5_vl.
_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, _I), t) for p, t in (
    (r"qwen[-_ ]?3\.5[-_ ]?\d*b?[-_ ]?a\d+b|qwen[-_ ]?3\.5[-_ ]?moe", "qwen3_5_moe"),
    (r"qwen[-_ ]?3\.5", "qwen3_5"),
    (r"qwen[-_ ]?3[-_ ]?vl[-_ ]?(?:\d+b[-_ ]?)?a\d+b", "qwen3_vl_moe"),
    (r"qwen[-_ ]?3[-_ ]?vl", "qwen3_vl"),
    (r"qwen[-_ ]?3[-_ ]?next", "qwen3_next"),
    (r"qwen[-_ ]?3[-_ ]?(?:moe|\d+b[-_ ]?a\d+b)", "qwen3_moe"),
    (r"qwen[-_ ]?3(?![.\d])", "qwen3"),
    (r"qwen[-_ ]?2\.5[-_ ]?vl", "qwen2_5_vl"),
    (r"qwen[-_ ]?2[-_ ]?vl", "qwen2_vl"),
    (r"qwen[-_ ]?(?:1\.5|2)[-_ ]?moe|qwen[-_ ]?(?:1\.5|2)[-_ ]?\d+b[-_ ]?a\d+(?:\.\d+)?b", "qwen2_moe"),
    (r"qwen[-_ ]?(?:1\.5|2\.5|2)(?![.\d])", "qwen2"),
    (r"gemma[-_ ]?3(?!\d)", "gemma3"),
    (r"gemma[-_ ]?2(?!\d)", "gemma2"),
    (r"llama[-_ ]?4(?!\d)", "llama4"),
    (r"seed[-_ ]?oss", "seed_oss"),
))
NEW_TYPE_RELEASES = ("and the first releases that carry a new type are those whose bugs (weight-name mappings, "
                     "attention, cache or device-placement paths) later patch releases fix")
"""What a crash said of a named model with no traceback adds about the transformers release (facts/loadfail.py
`said_type_need`, which reads the first release of the type from catalog/tf_model_types.json)."""


def family_type(text: str) -> str | None:
    """The model_type of the first model family of `_FAMILIES` the text names ("Qwen1.5" is qwen2, "Gemma3"
    gemma3), or None."""
    return next((mtype for pat, mtype in _FAMILIES if pat.search(text)), None)


UPGRADE_OPENING = "The words tie the failure to an upgrade"
"""How `upgrade_lead` opens (said.py puts it before the judging of the releases the words name)."""


def upgrade_lead(text: str) -> str | None:
    """The lead for a failure the words tie to an upgrade (`UPGRADE`): the package the words name, the release
    that worked when they give it, and what to do. None without upgrade words."""
    m = UPGRADE.search(text)
    if m is None:
        return None
    w = _WORKED.search(text)
    pkg = ver = None
    if w:
        n = next(i for i in (1, 2, 3) if w.group(f"p{i}"))
        pkg, ver = w.group(f"p{n}").lower(), w.group(f"v{n}").lstrip("vV")
    pkgs = [p.lower() for p in _NAMED_PKG.findall(text)]
    pkg = pkg or (pkgs[0] if pkgs else None)
    worked = f"; the words name {pkg} {ver} as the release that worked" if ver else ""
    opening = (f"{UPGRADE_OPENING} (\"{m.group(0).strip()}\"){worked}: a version regression — code written for one "
               f"release of {pkg or 'a package'} calling it in a way a later release changed (a renamed or removed "
               "argument, a moved function, a new default)")
    if pkg is None:
        return opening + ": the package upgraded and the release that worked are what to state."
    ver = ver or failed_release(text, pkg, None, works=True)
    bad = failed_release(text, pkg, ver)
    if bad:   # both releases said (trial 15): name them, pin the one that worked or upgrade past the one that broke
        return f"{opening}.{regression_advice(pkg, ver, bad)}; `pip show {pkg}` gives the one that ran."
    pin = f"`pip install {pkg}=={ver}`" if ver else f"`pip install {pkg}==<the release that worked>`"
    return (f"{opening}. Pin {pkg} back to the release that worked ({pin}), or move the trainer to a release "
            f"written for the new one (its requirements state the range); `pip show {pkg}` gives the one that ran.")


# accelerate's default config (accelerate commands/config/config_args.py: $HF_HOME/accelerate/default_config.yaml,
# read by `accelerate launch` without --config_file)
DEFAULT_CONFIG = ("accelerate's default config — ~/.cache/huggingface/accelerate/default_config.yaml (under "
                  "$HF_HOME), written by an earlier `accelerate config` and read by every `accelerate launch` without "
                  "--config_file: `accelerate env` prints the config in use; delete it or pass --config_file")


def engine_lead(text: str) -> str | None:
    """The lead for a distributed engine said to be on although the user turned it off (userwords_vocab
    ENGINE_ON_ANYWAY), or None."""
    m = ENGINE_ON_ANYWAY.search(text)
    if m is None:
        return None
    return (f"The words say an engine was on though it was turned off (\"{m.group(0).strip()}\"): the launcher's "
            f"own config outranks the run's — most often {DEFAULT_CONFIG}.")


def source_lead(text: str) -> str | None:
    """The lead for a failure said of a source checkout (`SOURCE`), or None."""
    m = SOURCE.search(text)
    if m is None:
        return None
    return (f"The words place the code on a source checkout (\"{m.group(0).strip()}\"): it runs code newer than "
            "any release, written against other releases of its dependencies (torch, transformers) than the "
            "installed ones; compare the checkout's requirements (pyproject.toml / setup.py / requirements.txt) "
            "with `pip show torch transformers`, move the package its traceback names to the release the "
            "checkout expects (or back to the one that worked), or install the last tagged release, whose pins "
            "were tested together.")


def moe_not_zero3_lead(setup: dict[str, Any]) -> str | None:
    """The lead for an MoE hang said under ZeRO-1/2 or DDP as well as (or instead of) ZeRO-3 (`setup`:
    statedwords.setup_words, its ``moe`` and ``not_zero3`` words), or None."""
    if not (setup.get("moe") and setup.get("not_zero3")):
        return None
    return (f"The words name {setup['not_zero3']} with a mixture-of-experts model (\"{setup['moe']}\"): ZeRO-1/2 "
            "and DDP keep every parameter whole on each rank, so ZeRO-3's expert gathers do not explain the hang. "
            "An MoE block that skips the experts no token reached gives each rank different work: where each expert "
            "is a module of its own (transformers 4.x), an expert that got tokens on one rank and none on another "
            "has a gradient on one and not the other, and the gradient reductions stop matching; transformers 5.x "
            "keeps the experts as one packed parameter (5.6.0 modeling_qwen3_moe.py:215-224, PR #41580), so every "
            "rank's gradient covers them all. Which code a model runs changes with the transformers release: pin the "
            "transformers release that last worked (`pip show transformers`) or move to one with packed experts, "
            "and with ZeRO-3 set the MoE block as a leaf module (deepspeed.utils.set_z3_leaf_modules).")


def end_lead(text: str, phase: str | None) -> str | None:
    """The lead for a crash said at the end of training (`phase` end), with a local model in the words or not."""
    if phase != "end":
        return None
    steps = ("after the training loop a trainer saves the final model, writes a model card and may look the base "
             "model up on the Hub (the card's base_model, push_to_hub), then runs a final evaluation")
    if _LOCAL.search(text):
        return (f"The words place the crash at the end of training with a local model: {steps}; a local path "
                "where a Hub repo id is looked up is not a Hub repo id, and huggingface_hub's id check raises "
                "HFValidationError (\"Repo id must be in the form 'repo_name' or 'namespace/repo_name'\") for "
                "it (so does a path that does not exist on this machine, which transformers then takes for a repo id) "
                "— a trainer release that does not catch it crashes after training (the checkpoints saved "
                "before are whole: the last checkpoint-N holds the trained weights). Update the trainer, or "
                "give the base model as a Hub id with the local copy in the HF cache.")
    return (f"The words place the crash at the end of training: {steps}; the traceback's innermost frames say "
            "which of them failed, and the last checkpoint-N saved before it holds the trained weights.")


def resumed_untrained(text: str) -> bool:
    """True when the words say a resumed run ended at once or trained nothing (userwords_vocab.RESUME_ENDED)."""
    return bool(RESUME_ENDED.search(text))


def resume_lead(symptom: str | None, phase: str | None) -> str | None:
    """The lead for a resumed run said to end at once (symptom no-update in the resume phase), or None."""
    if symptom != "no-update" or phase != "resume":
        return None
    return ("The words say a resumed run ended without training: HF's Trainer restores the checkpoint's "
            "global_step and skips the epochs and batches already trained (\"Continuing training from global "
            "step N\", \"Will skip the first K epochs\"), so a checkpoint already at the run's last step "
            "(max_steps, or num_train_epochs × the steps of an epoch) leaves no step to run and the run ends as "
            "if complete. To train further, raise num_train_epochs or max_steps past the checkpoint's step (its "
            "trainer_state.json gives global_step and max_steps); for a new pass on new data, load the adapter "
            "(adapter_name_or_path) instead of resuming.")


def kind_lead(said: dict[str, Any], setup: dict[str, Any]) -> str | None:
    """``ev.said.lead`` from the kinds of this module for the words of `said` (userwords.read_words' answer) with
    `setup` (statedwords.setup_words of the same file): the first of an upgrade, a source checkout, an MoE hang
    beyond ZeRO-3, a crash at the end of training, a resume that trained nothing (a named model's transformers
    release is facts/loadfail.py's, with `family_type` and `NEW_TYPE_RELEASES`).
    None when no kind applies."""
    text = str(said.get("text") or "")
    symptom, phase = said.get("symptom"), said.get("phase")
    if symptom == "hang":
        return moe_not_zero3_lead(setup)
    if symptom == "no-update":
        return resume_lead(symptom, phase)
    if symptom not in ("error", "version"):
        return None
    return upgrade_lead(text) or engine_lead(text) or source_lead(text) or end_lead(text, phase)


# ATen's dtype check of an op's operands (aten/src/ATen/native: "expected scalar type Float but found BFloat16";
# torch 2.x also words it "expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16")
DTYPE_MISMATCH = re.compile(r"expected scalar type (?P<want>\w+) but found (?P<got>\w+)|"
                            r"expected m(?:at)?1 and m(?:at)?2 "
                            r"to have the same dtype")
WRAP_CLASS = re.compile(r"Could not find the transformer layer class to wrap in the model")


def layer_cause(cls: str, msg: str, words: str = "") -> str | None:
    """What FSDP's auto-wrap refusal or a dtype mismatch inside a layer establishes (`msg` the exception's text,
    `words` the report's other text), in words, or None for other messages."""
    if WRAP_CLASS.search(msg):
        return ("accelerate's FSDP auto wrap found no module of the class(es) named in "
                "fsdp_transformer_layer_cls_to_wrap (or the model's _no_split_modules): name this model's decoder "
                "layer class (LlamaDecoderLayer, Qwen2DecoderLayer, ...); and where FSDP was never asked for, "
                "it was turned on by " + DEFAULT_CONFIG)
    m = DTYPE_MISMATCH.search(msg)
    if m is None:
        return None
    found = set(re.findall(r"but found (\w+)", words + "\n" + msg))
    follows = (f"the report shows it with {' and with '.join(sorted(found))} alike, so it follows whatever precision "
               "is set and the precision flag is not the cause; " if len(found) > 1 else "")
    return ("one op got an input and a weight in different dtypes, so parts of the model were cast apart from what "
            f"reaches them: {follows}with several GPUs visible, a plain `python` launch (no torchrun) lets "
            "device_map=\"auto\" spread the model over every visible GPU, its parts cast per device: set "
            "CUDA_VISIBLE_DEVICES=0 for one GPU, or launch data parallel with torchrun / llamafactory-cli; "
            "otherwise a module kept in fp32 (a norm, a value head, an lm_head) fed half-precision activations "
            "outside autocast")


_STATES_RANGE = re.compile(r"is required for|\brequires?\b|[<>=]=\s*\d|\bbut found\b")


def upgrade_beside_crash(ev_facts: dict[str, Any], ev: Any) -> None:
    """A title above one log line that ties the crash to an upgrade ("After upgrading trl the SFT run fails" over
    a TypeError): add to ``ev.crash.cause_text`` that the release before the upgrade is the one the code was
    written for, so the exception's own reading ("upgrade that package ...") is not the only direction given.
    `ev_facts` the ``ev`` facts (its ``crash``), `ev` the Evidence (the words of the file that holds the line:
    ``FileEvidence.said``). Nothing changes without a crash or without upgrade words beside it."""
    crash = ev_facts.get("crash")
    if not crash or crash.get("kind") != "exception":
        return
    if _STATES_RANGE.search(f"{crash.get('msg') or ''} {crash.get('text') or ''}"):
        return   # the exception states the range itself (a start-up refusal): its own reading says what to install
    loc = crash.get("location")
    at = str(loc.get("file") if isinstance(loc, dict) else loc or "")
    for f in ev.files:
        words = str((f.said or {}).get("text") or "")
        if not words or not at.startswith(f.read.path):
            continue
        m = UPGRADE.search(words)
        if m is None:
            return
        w = _WORKED.search(words)
        n = next((i for i in (1, 2, 3) if w and w.group(f"p{i}")), None)
        named = [p.lower() for p in _NAMED_PKG.findall(words)]
        pkg = w.group(f"p{n}").lower() if w and n else (named[0] if named else "the package upgraded")
        back = f" ({w.group(f'v{n}')})" if w and n else ""
        sep = "; " if crash.get("cause_text") else " — "
        crash["cause_text"] = (str(crash.get("cause_text") or "") + f"{sep}the words above it tie it to an upgrade "
                               f"(\"{m.group(0).strip()}\"): a version regression — the release of {pkg} before "
                               f"the upgrade{back} is the one the code was written for: pin it back, or move the "
                               "trainer to a release written for the new one")
        return


# -- appended (wt/fixtrial15pm, trial 15): the release the words say fails beside the one that worked, and a failure
# the words say stays across several releases of one package while another package's release is held fixed

# words of a clause that says its release failed, or that it worked
_FAIL_WORDS = re.compile(r"\b(?:fail\w*|errors?|error(?:ed|s)? out|br(?:eaks?|oke|oken)|crash\w*|not work\w*|"
                         r"doesn'?t work|upgrad\w*|updat\w*|bump\w*)\b|报错|失败|出错|不行|崩溃|升级|更新", _I)
_WORK_WORDS = re.compile(r"\b(?:works?|worked|working|fine|ok|okay|runs? (?:fine|well))\b|正常|没问题|可以|能跑|好了", _I)
_CLAUSE = re.compile(r"[^,;.!?，。；！？\n]+(?:\.\d[^,;.!?，。；！？\n]*)*")


def failed_release(text: str, pkg: str, worked: str | None, works: bool = False) -> str | None:
    """The release of `pkg` the words say fails ("fails with transformers 4.46.0", "升级 peft 到 0.11.0 后报错",
    "after upgrading trl to 0.12"): the first version in a clause that names `pkg` (or no other package) with failure
    or upgrade words (`_FAIL_WORDS`) and no words of working, other than `worked`. With `works` the reverse: the
    release a clause says works ("4.45.2 正常", "0.10.0 is fine"). None when the words give none."""
    for c in _CLAUSE.finditer(text):
        clause = c.group(0)
        named = {p.lower().replace("pytorch", "torch") for p in _NAMED_PKG.findall(clause)}
        if named and pkg.replace("pytorch", "torch") not in named:
            continue
        said_fail, said_work = _FAIL_WORDS.search(clause), _WORK_WORDS.search(clause)
        if not (said_work and not said_fail if works else said_fail and not said_work):
            continue
        for v in re.finditer(r"(?<![\w.])" + _VER + r"(?![\w.])", clause, _I):
            got = v.group(0).lstrip("vV")
            if got != worked:
                return got
    return None


def regression_advice(pkg: str, worked: str | None, failed: str | None) -> str:
    """The sentence naming both releases of a version regression and the two ways out: pin the release that worked,
    or upgrade past the one that broke (a regression of one release is most often fixed in a later one)."""
    both = (f"{pkg} {worked} works and {pkg} {failed} fails" if worked and failed else
            f"{pkg} {failed} fails" if failed else f"{pkg} {worked} works")
    past = f"past {failed} " if failed else ""
    return (f" The words say {both}: pin `pip install {pkg}=={worked or '<the release that worked>'}`, or upgrade "
            f"{pkg} {past}(`pip install -U {pkg}`) — a regression in one release is most often fixed in a later "
            f"one (the release notes of {pkg} and its issues for the error's text say which)")


# the words say several releases of one package were tried and the failure stayed
_TRIED = re.compile(r"\b(?:tested|tried|both|all of them|either|each|same (?:error|issue|problem)|still|"
                    r"no matter)\b|换了|试了|试过|都(?:不行|报错|一样|失败|出现)|均(?:报错|失败)", _I)


PERSIST_OPENING = "The words say the error stays across"
"""How `persist_lead` opens (said.py puts it before the releases the words name, as `UPGRADE_OPENING`)."""


def persist_lead(said: dict[str, Any], versions: dict[str, Any]) -> str | None:
    """The lead when the words list two or more releases of one package as tried and failing alike ("pytorch 2.2
    and 2.4 are tested", "torch 2.1/2.3 都报错") while another package is named at one release (`versions`:
    statedwords.stated_versions, its ``also``): the package that changed is not the cause, the one held fixed is
    the lead (trial 15: transformers#34702, a regression of transformers 4.46.2 told with two torch releases).
    None for other symptoms than error/version, without `_TRIED` words, with words of a release that works, or
    when no package is held at one release."""
    text = str(said.get("text") or "")
    tried = _TRIED.search(text)
    if said.get("symptom") not in ("error", "version") or tried is None or _WORK_WORDS.search(text):
        return None   # a release said to work is no failure that stays (`upgrade_lead` reads that)
    several = [(k, [v["version"], *v.get("also", [])]) for k, v in versions.items() if v.get("also") and v["version"]]
    fixed = [(k, v["version"]) for k, v in versions.items()
             if not v.get("also") and v.get("version") and re.fullmatch(r"\d+(?:\.\d+)+", str(v["version"]))]
    if not several or not fixed:
        return None
    pkg, rels = several[0]
    held = ", ".join(f"{k} {v}" for k, v in fixed)
    one = len(fixed) == 1
    return (f"{PERSIST_OPENING} {pkg} {' and '.join(rels)} (\"{tried.group(0)}\"), so {pkg}'s "
            f"release is not what breaks it; {held} {'is the release' if one else 'are the releases'} the words "
            f"hold fixed: a regression in {'it' if one else 'one of them'} is the lead. Try "
            f"{'its' if one else 'each'} release before and the newest (`pip install -U "
            f"{' '.join(k for k, _ in fixed)}`) — a regression in one release is most often fixed in a later one; the release notes "
            "and issues for the error's text say which.")


# A release said to work beside one said to fail, with no upgrade word ("peft 0.10.0 works, 0.11.0 fails",
# "deepspeed 0.14.0 可以跑，0.14.1 报错"): the same version regression; appended to `UPGRADE` (trial 15)
_GAP = r"(?:[^,.;，。；\n]|\.(?=\d)){0,30}?"
_WORKS_THEN_FAILS = (r"\b" + _PKG + r"\s*(?:==|=)?\s*" + _VER + _GAP + r"(?:works?|worked|is fine|was fine|runs? fine|"
                     r"可以跑?|正常|没问题|能跑)[^。\n]{0,40}?" + _VER + _GAP + r"(?:fails?|failed|breaks?|errors?|"
                     r"crashes|does(?:n't| not) work|报错|不行|失败|出错)")
UPGRADE = re.compile(UPGRADE.pattern + "|" + _WORKS_THEN_FAILS, _I)
