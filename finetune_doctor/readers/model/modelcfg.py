"""Find a model's architecture without loading it: where LLaMA-Factory would read its config.json.

``load_arch`` resolves ``model_name_or_path`` in this order and records the step in ``ModelArch.source_kind``:

1. ``local``: a directory holding ``config.json`` (absolute, else relative to the YAML's directory, else to the
   current directory), or a ``config.json`` file itself, as ``AutoConfig.from_pretrained`` would read it;
2. ``model-config``: an explicit ``model_config=`` FILE or DIR (the CLI's ``--model-config``);
3. ``hf-cache``: the Hugging Face hub cache (YAML ``cache_dir``, ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``,
   ``HF_HOME``; see readers/model/caches.py);
4. ``modelscope-cache`` when ``USE_MODELSCOPE_HUB`` is on, ``openmind-cache`` when ``USE_OPENMIND_HUB`` is on
   (LLaMA-Factory's switches, extras/misc.py:294-336);
5. ``hub`` for a config.json an earlier run downloaded into the doctor's cache folder;
6. ``catalog``: the bundled catalog by id, alias or name;
7. ``hub``: with ``allow_download=True`` (check/estimate/probe/data, never lint) and unless ``offline`` or
   ``HF_HUB_OFFLINE=1``: a download of the JSON configs only (readers/model/hub.py).

Nothing here imports model code or torch (``trust_remote_code`` stays ignored). ``exact="auto"`` adds the
transformers meta-device build (readers/model/meta.py) for model types the generic decoder is not verified on,
when torch and transformers are installed; ``exact=True`` adds it for any type.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.errors import InputError
from finetune_doctor.readers.model.caches import (
    REPO_ID,
    repo_of_cache_folder,
    hub_cache_config,
    hub_cache_dirs,
    modelscope_cache_config,
    openmind_cache_config,
)
from finetune_doctor.readers.lfenv import env_enabled
from finetune_doctor.readers.model.catalog import (
    catalog_arch,
    catalog_entries,
    catalog_names,
    did_you_mean,
    find_in_catalog,
    owner_joined_repo,
    release_tag_lacking,
)
from finetune_doctor.readers.model import byname
from finetune_doctor.readers.model.configjson import json_key_positions, read_config_json
from finetune_doctor.readers.model.errors import ModelConfigInvalid, ModelUnresolved
from finetune_doctor.readers.model.generic import arch_from_config, not_sized, with_note
from finetune_doctor.readers.model.hub import cached_download, download_configs
from finetune_doctor.types import Assumption, SourceDoc

__all__ = [
    "ModelConfigInvalid", "ModelUnresolved", "arch_from_config", "catalog_arch", "catalog_entries", "catalog_names",
    "did_you_mean", "find_in_catalog", "hub_cache_config", "hub_cache_dirs", "json_key_positions", "load_arch",
    "read_config_json",
]

SOURCE_KINDS = ("local", "model-config", "hf-cache", "modelscope-cache", "openmind-cache", "catalog", "hub", "context")


def _local_candidates(name: str, base_dir: str | None) -> list[Path]:
    p = Path(os.path.expanduser(name))
    if p.is_absolute():
        return [p]
    out = []
    if base_dir:
        out.append(Path(base_dir) / p)
    out.append(Path.cwd() / p)
    return out


def _unreadable(cand: Path) -> str | None:
    """Why `cand` cannot be looked at although something is there (a path that exists but is not readable, or
    whose nearest existing folder cannot be searched), or None."""
    try:
        if os.path.lexists(cand):
            if not os.access(cand, os.R_OK) or (cand.is_dir() and not os.access(cand, os.X_OK)):
                return f"{cand} exists but is not readable here (permission denied)"
            return None
        for up in cand.parents:
            if os.path.isdir(up):
                return None if os.access(up, os.X_OK) else \
                    f"{cand} cannot be looked up: {up} is not searchable here (permission denied)"
    except OSError as err:
        return f"{cand} cannot be read here ({err.strerror or err})"
    return None


def _adapter_base(d: Path) -> str | None:
    """``base_model_name_or_path`` of a PEFT adapter directory, or None."""
    f = d / "adapter_config.json"
    if not f.is_file():
        return None
    try:
        v = json.loads(f.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return v if isinstance(v, str) and v.strip() else None


def _from_file(path: Path, name: str, kind: str, note: str, tf_major: int | str | None) -> tuple[ModelArch, SourceDoc]:
    cfg, doc = read_config_json(path)
    _require_model_type(cfg, name, str(path))
    from finetune_doctor.readers.model.weights import stored_dtype   # a local config.json only (issue #22)

    stored = None if _names_dtype(cfg) else stored_dtype(path.parent)
    if stored is not None:
        # what torch_dtype="auto" resolves to when config.json names none: the weights' own dtype
        cfg = {**cfg, "torch_dtype": stored[0]}
        note = "; ".join(x for x in (note, f"checkpoint dtype {stored[0]} from the safetensors header of "
                                           f"{stored[1]} (config.json names none)") if x)
    arch = arch_from_config(cfg, name, str(path), positions=doc.positions, transformers_major=tf_major)
    arch = replace(arch, source_kind=kind)
    return (with_note(arch, note) if note else arch), doc


def _names_dtype(cfg: dict[str, Any]) -> bool:
    subs = [cfg] + [cfg[k] for k in ("text_config", "llm_config") if isinstance(cfg.get(k), dict)]
    return any(isinstance(d.get("torch_dtype") or d.get("dtype"), str) and (d.get("torch_dtype") or d.get("dtype"))
               != "auto" for d in subs)


def _require_model_type(cfg: dict, name: str, path: str) -> None:
    """transformers' AutoConfig refuses a config.json without ``model_type`` ("Unrecognized model in ... Should
    have a `model_type` key in its config.json"), unless a known model type's name occurs in the path it was
    given (configuration_auto.py ``AutoConfig.from_pretrained``: the pattern fallback). So does LLaMA-Factory,
    which loads through it: issue 27 saw such a config get "fits", exit 0. Raises ModelConfigInvalid at line 1."""
    mt = cfg.get("model_type")
    if isinstance(mt, str) and mt.strip():
        return
    known = {str(e.get("config", {}).get("model_type") or "") for e in _catalog_entries()} - {""}
    if any(t in name for t in sorted(known, key=len, reverse=True)):
        return
    raise ModelConfigInvalid("config.json has no `model_type`: transformers' AutoConfig (and so LLaMA-Factory) "
                             "refuses it with \"Unrecognized model ... Should have a `model_type` key\"; add the "
                             "model_type of its architecture (e.g. \"qwen2\")", file=path, line=1,
                             missing="model_type in config.json")


def _catalog_entries() -> tuple:
    try:
        from finetune_doctor.readers.model.catalog import catalog_entries

        return tuple(catalog_entries())
    except (OSError, ValueError):
        return ()


def _model_config_file(model_config: str, base_dir: str | None) -> Path:
    for cand in _local_candidates(model_config, base_dir):
        try:
            if cand.is_file():
                return cand
            if cand.is_dir() and (cand / "config.json").is_file():
                return cand / "config.json"
        except OSError as err:   # a name too long for the OS (is_file passes only ENOENT/ENOTDIR/ELOOP quietly)
            raise InputError(f"--model-config: cannot read: {err.strerror or err}", file=str(cand)) from None
    raise ModelUnresolved(f"--model-config {model_config}: no such file, and no config.json in such a directory",
                          model=model_config, missing="the model config file",
                          fix="--model-config path/to/config.json")


FOLDER_WORDS = frozenset({"models", "model", "saves", "save", "output", "outputs", "checkpoints", "ckpt", "data",
                           "weights", "pretrained", "hf_models", "llm", "llms", "base_models"})


def _fix_command(name: str) -> str:
    # "models/llama3-8b-pro" has a repo id's shape but is LF's example of a local folder: a name whose owner
    # part is a common folder word is not offered as a hub download
    if REPO_ID.match(name) and name.split("/", 1)[0].lower() not in FOLDER_WORDS:
        return (f"hf download {name} config.json  (or --model-config path/to/config.json)")
    return "--model-config path/to/config.json"


def load_arch(model_name_or_path: str, *, base_dir: str | None = None, hf_home: str | None = None,
              cache_dir: str | None = None, model_config: str | None = None, allow_download: bool = False,
              offline: bool = False, timeout_s: float = 2.0, exact: bool | str = False,
              transformers_major: int | str | None = None, template: str | None = None,
              multimodal: str | None = None, assumptions: list[Assumption] | None = None,
              context_config: tuple[dict[str, Any], str, str] | None = None,
              llama_pro_layers: int | None = None, _depth: int = 0) -> tuple[ModelArch, SourceDoc | None]:
    """Architecture of LLaMA-Factory's ``model_name_or_path``; the module docstring gives the search order.

    `base_dir` is the directory of the YAML that names the model (relative paths are tried there first);
    `hf_home` and `cache_dir` add hub caches to search first; `model_config` is an explicit config.json FILE|DIR;
    `allow_download` permits the JSON-config download (`offline` or ``HF_HUB_OFFLINE=1`` forbid it; `timeout_s`
    bounds it, seconds); `exact` ``False`` | ``"auto"`` | ``True`` chooses the meta-device build;
    `transformers_major` the training stack's transformers, a major number or a version string such as
    ``"5.6.0"`` (MoE expert layout, router modules). A directory holding only a PEFT ``adapter_config.json`` is
    sized as its ``base_model_name_or_path``. `template` (the YAML's) and `multimodal` (why the YAML says the model
    sees images/video/audio, readers/model/byname.py ``multimodal_hint``) narrow a match by name; every value taken
    from a name rather than a config.json is appended to `assumptions` as an `Assumption` (name ``model``).
    `context_config` is (config.json dict, where it was read, note) from a ``doctor context`` file: it acts as
    ``--model-config`` (consulted after the local folder, source kind ``context``). `llama_pro_layers` (the YAML's
    ``freeze_trainable_layers`` when it sets ``use_llama_pro``) lets a folder named after a base model plus
    ``-pro`` be sized as that base with as many blocks added (`_by_expansion`). Returns the arch and the
    `SourceDoc` of the config.json read (None for a catalog match or a context; `notes` then say how it matched).

    Raises ModelConfigInvalid (an InputError with file, line and key) for a config.json that is unreadable, not
    JSON, or lacks or misstates a required field; ModelUnresolved (an InputError carrying `missing` and the
    `fix` command) for a name found nowhere.
    """
    name = str(model_name_or_path or "").strip()
    if not name:
        raise ModelUnresolved("model_name_or_path is empty", model="", missing="model_name_or_path",
                              fix="model_name_or_path: ORG/NAME or a local directory")
    ctx = _Ctx(template, multimodal, assumptions if assumptions is not None else [])
    ctx.context_config = context_config
    ctx.llama_pro_layers = llama_pro_layers
    arch, doc = _resolve(name, base_dir, hf_home, cache_dir, model_config, allow_download, offline, timeout_s,
                         transformers_major, _depth, ctx)
    if exact:
        from finetune_doctor.readers.model.meta import maybe_exact

        arch = maybe_exact(arch, force=exact is True)
    return arch, doc


class _Ctx:
    """What narrows a match by name (`template`, `multimodal`) and where its assumptions go."""

    def __init__(self, template: str | None, multimodal: str | None, assumptions: list[Assumption]):
        self.template, self.multimodal, self.assumptions = template, multimodal, assumptions
        self.context_config: tuple[dict[str, Any], str, str] | None = None
        self.llama_pro_layers: int | None = None


def _by_name(name: str, found: tuple[dict[str, Any], str] | None, ctx: _Ctx, tf_major: int | str | None,
             infer_ok: bool = True) -> ModelArch | None:
    """The catalogue architecture a name gives, or None. An exact repo id is taken as is (it is what LLaMA-Factory
    downloads); any other match must keep the family, size class and MoE-ness the name states and is recorded as
    an assumption; with `infer_ok`, a name no entry matches is sized as the one architecture its family, size and
    modality single out (readers/model/byname.py ``infer``)."""
    var = byname.shell_variables(name)
    if found is not None and found[1] == "id" and not var:
        return catalog_arch(found[0], name, "id", transformers_major=tf_major)
    inferred = None
    if found is not None and byname.same_class(name, found[0]):
        entry, how = found
        if not (ctx.multimodal and not byname.is_multimodal(byname.resolve_entry(entry)[0])):
            return _assumed(catalog_arch(entry, name, how, transformers_major=tf_major), name, entry["id"], "", ctx)
        inferred = byname.infer(name, ctx.multimodal, ctx.template)
        if inferred is None:   # the name's text model: keep it, and say what disagrees
            arch = catalog_arch(entry, name, how, transformers_major=tf_major)
            return _assumed(arch, name, entry["id"], f"{ctx.multimodal}, but {entry['id']} has no vision tower: "
                                                     "sized as the text model", ctx)
    if inferred is None and infer_ok:
        inferred = byname.infer(name, ctx.multimodal, ctx.template)
    if inferred is None:
        return None
    arch = catalog_arch(inferred.entry, name, "folder", transformers_major=tf_major)
    why = f"the only catalogue architecture with the {inferred.why}"
    if inferred.others:
        why += f" (not the text-only {', '.join(inferred.others)})"
    return _assumed(arch, name, inferred.entry["id"], why, ctx)


def _assumed(arch: ModelArch, name: str, entry_id: str, why: str, ctx: _Ctx) -> ModelArch:
    """Record that `arch` was taken from the catalogue entry `entry_id` because of the name `name`."""
    path_like = not REPO_ID.match(name) or bool(byname.shell_variables(name)) \
        or name.split("/", 1)[0].lower() in FOLDER_WORDS   # models/llama3-8b: a folder, as _fix_command says
    source = "folder name" if path_like else "repository name"
    var = byname.shell_variables(name)
    note = f"sized as the catalogue entry {entry_id} from its {source} '{name}'"
    if var:
        note += (f" (model_name_or_path holds the unexpanded shell variable {', '.join(var)}, which LLaMA-Factory "
                 "reads as written)")
    if why:
        note += f": {why}"
    note += "; --model-config FILE gives the real config.json"
    hit = find_in_catalog(entry_id)
    tag = release_tag_lacking(name, hit[0]) if hit is not None else None
    if tag:
        # README: a name that states another architecture is never matched to a neighbour silently; a release tag
        # the entry lacks may be one (GLM-4-9B-0414 is not glm-4-9b's architecture), so the match stays open and
        # moves the verdict until the checkpoint's own config.json is read
        ctx.assumptions.append(Assumption(
            name="model", value=entry_id,
            source=f"{source} '{name}': its release tag {tag} is not the catalogue entry's, and a later release of a "
                   "family may change its architecture (GLM-4-9B-0414 is transformers' glm4, glm-4-9b the chatglm "
                   "remote code)",
            alternatives=(f"another architecture ({name}'s own config.json)",),
            resolve_with="--model-config FILE (the checkpoint's config.json)", moves_verdict=True))
        return with_note(arch, note)
    ctx.assumptions.append(Assumption(name="model", value=entry_id, source=source,
                                      resolve_with="--model-config"))
    return with_note(arch, note)


def _resolve(name: str, base_dir: str | None, hf_home: str | None, cache_dir: str | None, model_config: str | None,
             allow_download: bool, offline: bool, timeout_s: float, tf_major: int | str | None,
             depth: int, ctx: _Ctx) -> tuple[ModelArch, SourceDoc | None]:
    looked: list[str] = []
    for cand in _local_candidates(name, base_dir):
        why_not = _unreadable(cand)
        if why_not:
            looked.append(why_not)
            continue
        # os.path's tests answer False for a name the OS refuses (ENAMETOOLONG for a 5,000-character
        # model_name_or_path, issue 27) where pathlib's raise
        if cand.name.endswith(".json") and os.path.exists(cand) and not os.path.isdir(cand):
            return _from_file(cand, name, "local", "", tf_major)   # read_config_json refuses non-regular files
        if os.path.isdir(cand):
            cfgp = cand / "config.json"
            if os.path.exists(cfgp):
                return _from_file(cfgp, name, "local", "", tf_major)
            base = _adapter_base(cand)
            if base and base != name and depth < 3:
                arch, doc = load_arch(base, base_dir=base_dir, hf_home=hf_home, cache_dir=cache_dir,
                                      model_config=model_config, allow_download=allow_download, offline=offline,
                                      timeout_s=timeout_s, transformers_major=tf_major, template=ctx.template,
                                      multimodal=ctx.multimodal, assumptions=ctx.assumptions, _depth=depth + 1)
                return with_note(arch, f"{cand} is a PEFT adapter; sized as its base model '{base}' "
                                       "(adapter_config.json)"), doc
            looked.append(f"{cand} has no config.json")
    if not looked:
        places = dict.fromkeys(str(c) for c in _local_candidates(name, base_dir))   # once each, in order
        looked.append(f"no config.json at {' or '.join(places)}")
    if model_config:
        return _from_file(_model_config_file(model_config, base_dir), name, "model-config",
                          f"config from --model-config {model_config}", tf_major)
    if ctx.context_config is not None:
        cfg, where, note = ctx.context_config
        arch = replace(arch_from_config(cfg, name, where, transformers_major=tf_major), source_kind="context")
        return (with_note(arch, note) if note else arch), None
    repo = repo_of_cache_folder(name)
    if repo is not None and depth < 3:
        before = len(ctx.assumptions)
        arch, doc = load_arch(repo, base_dir=base_dir, hf_home=hf_home, cache_dir=cache_dir,
                              allow_download=allow_download, offline=offline, timeout_s=timeout_s,
                              transformers_major=tf_major, template=ctx.template, multimodal=ctx.multimodal,
                              assumptions=ctx.assumptions, _depth=depth + 1)
        _folder_repo_assumed(name, repo, "the Hugging Face hub cache's folder form models--ORG--NAME "
                                         "(huggingface_hub file_download.py repo_folder_name)", before, ctx)
        return with_note(arch, f"{name} is a hub-cache folder not on this machine; sized as {repo}, the repository "
                               "its folder name encodes"), doc
    if REPO_ID.match(name):
        hit = hub_cache_config(name, hf_home, cache_dir)
        if hit is not None:
            return _from_file(hit, name, "hf-cache", "read from the HF hub cache (offline)", tf_major)
        looked.append("not in the HF cache")
        if env_enabled("USE_MODELSCOPE_HUB"):
            hit = modelscope_cache_config(name, cache_dir)
            if hit is not None:
                return _from_file(hit, name, "modelscope-cache", "read from the ModelScope cache", tf_major)
            looked.append("not in the ModelScope cache")
        if env_enabled("USE_OPENMIND_HUB"):
            hit = openmind_cache_config(name, cache_dir)
            if hit is not None:
                return _from_file(hit, name, "openmind-cache", "read from the openMind cache", tf_major)
            looked.append("not in the openMind cache")
        hit = cached_download(name)
        if hit is not None:
            return _from_file(hit, name, "hub", "config.json downloaded earlier from the hub (doctor's cache)",
                              tf_major)
    found = find_in_catalog(name)
    # a hub repository the catalogue does not hold is downloaded before its name is read for a size
    arch = _by_name(name, found, ctx, tf_major, infer_ok=not (allow_download and REPO_ID.match(name)))
    if arch is not None:
        return arch, None
    arch = _by_parent(name, ctx, tf_major)
    if arch is not None:
        return arch, None
    arch = _by_expansion(name, ctx, tf_major)
    if arch is not None:
        return arch, None
    arch = _by_owner_folder(name, ctx, tf_major)
    if arch is not None:
        return arch, None
    looked.append("not in the bundled catalog")
    if allow_download and REPO_ID.match(name):
        dl = download_configs(name, offline=offline, use_modelscope=env_enabled("USE_MODELSCOPE_HUB"),
                              timeout_s=timeout_s)
        if dl.config is not None:
            return _from_file(dl.config, name, "hub", dl.note, tf_major)
        looked.append(dl.note)
        arch = _by_name(name, found, ctx, tf_major)
        if arch is not None:
            return with_note(arch, dl.note), None
    raise _unknown(name, looked)


def _by_parent(name: str, ctx: _Ctx, tf_major: int | str | None) -> ModelArch | None:
    """A checkpoint folder not on this machine (``.../qwen2.5-7b-sft-v3/checkpoint-1200``) sized by the nearest
    ancestor folder name that matches the catalogue (byname.py `checkpoint_parent`), as an assumption; None when
    the leaf is no checkpoint-like folder or the parent's name matches nothing."""
    split = byname.checkpoint_parent(name)
    if split is None:
        return None
    parent, leaf = split
    arch = _by_name(parent, find_in_catalog(parent), ctx, tf_major)
    if arch is None:
        return None
    # the text reporter keeps notes that start "sized as the catalogue entry" (facts/config.py); no "; " inside
    return with_note(arch, f"sized as the catalogue entry of its parent folder '{parent}': the path '{name}' does not "
                           f"exist on this machine, and '{leaf}' is a folder a training run writes (a checkpoint or "
                           "an export), which names no model")


def _folder_repo_assumed(name: str, repo: str, form: str, before: int, ctx: _Ctx) -> None:
    """Record as the ``model`` assumption that the folder `name` was read as the repository `repo` (its `form`),
    unless the lookup of `repo` already recorded one (a name match of its own) since `before` assumptions."""
    if any(a.name == "model" for a in ctx.assumptions[before:]):
        return
    ctx.assumptions.append(Assumption(
        name="model", value=repo,
        source=f"folder name '{name}' read as the repository {repo} ({form}); the folder is not on this machine",
        alternatives=(f"another checkpoint saved under that name ({name}'s own config.json)",),
        resolve_with="--model-config FILE (the checkpoint's config.json)"))


_SEPARATOR_FORM = {"___": "owner___name, the ModelScope-style triple underscore",
                   "__": "owner__name", "_": "owner_name", "--": "owner--name, the hub cache's separator"}


def _by_owner_folder(name: str, ctx: _Ctx, tf_major: int | str | None) -> ModelArch | None:
    """A folder named after a repository with its owner joined to its name (``/workspace/models/Qwen_Qwen3-14B``,
    ``Qwen__Qwen3-14B``, ``Qwen___Qwen2___5-7B``: catalog.py `owner_joined_repo`) sized as the catalogue entry of
    that repository, the reading recorded as the ``model`` assumption (trial 18, LlamaFactory#8641); None when the
    name has no catalogue owner in front or the repository it reads as matches nothing."""
    joined = owner_joined_repo(name)
    if joined is None:
        return None
    repo, sep = joined
    found = find_in_catalog(repo)
    if found is None and not byname.traits(repo).family:
        return None   # `qwen_7b`: the owner is the only family word, and a name with none is no repository
    before = len(ctx.assumptions)
    arch = _by_name(repo, found, ctx, tf_major)
    if arch is None:
        return None
    _folder_repo_assumed(name, repo, _SEPARATOR_FORM[sep], before, ctx)
    return with_note(arch, f"sized as the catalogue entry of {repo}: the folder '{name}' is not on this machine and "
                           f"its name reads as that repository ({_SEPARATOR_FORM[sep]})")


def _by_expansion(name: str, ctx: _Ctx, tf_major: int | str | None) -> ModelArch | None:
    """A LLaMA Pro checkpoint not on this machine (``models/llama3-8b-pro``, the folder LF's example expands
    Meta-Llama-3-8B-Instruct into) sized as its base (byname.py `expansion_base`) with `ctx.llama_pro_layers`
    decoder blocks added; None without ``use_llama_pro``, when the base matches nothing, or for a base whose layers
    are not all alike (`layer_types`: the copies' kinds would be a guess).

    Why freeze_trainable_layers is the number added: LF's use_llama_pro trains every `stride`-th block with
    stride = num_layers // freeze_trainable_layers and raises unless it divides num_layers (LF
    src/llamafactory/model/adapter.py:80-88 at the snapshot), and LF's expansion script inserts one copy after every
    num_layers // num_expand original blocks (examples/extras/llama_pro/expand.sh, ``--num_expand 8`` for a
    ``freeze_trainable_layers: 8`` YAML): the trained blocks are the inserted ones exactly when the two are equal. So
    it is an assumption (``llama-pro-blocks``), removed by the expanded checkpoint's config.json."""
    added = ctx.llama_pro_layers
    base = byname.expansion_base(name)
    if not added or added <= 0 or base is None:
        return None
    arch = _by_name(base, find_in_catalog(base), ctx, tf_major)
    if arch is None or arch.layer_types or arch.num_experts:
        return None
    ctx.assumptions.append(Assumption(
        name="llama-pro-blocks", value=arch.num_layers + added,
        source=f"folder name '{name}' with use_llama_pro: {arch.num_layers} blocks of the base plus "
               f"freeze_trainable_layers ({added}) added by LF's LLaMA Pro expansion (--num_expand = the trained "
               "blocks, LF model/adapter.py:80-88)",
        alternatives=(f"another --num_expand ({name}'s own config.json num_hidden_layers)",),
        resolve_with="--model-config FILE (the expanded checkpoint's config.json)"))
    return with_note(replace(arch, num_layers=arch.num_layers + added),
                     f"sized as the catalogue entry of '{base}' with {added} LLaMA Pro blocks added "
                     f"({arch.num_layers + added} layers): '{name}' is not on this machine")


def _unknown(name: str, looked: list[str]) -> ModelUnresolved:
    var = byname.shell_variables(name)
    # a suggestion keeps the family and MoE-ness the name states (Qwen2-57B-A14B is not Qwen2-7B)
    # and says what it does not share (byname.suggestion_note: MoE-ness, another size); the stated size first
    sugg = [] if var and name.strip() in var else sorted((
        s + (byname.suggestion_note(name, e[0]) if e is not None else "") for s in did_you_mean(name, 12)
        if (e := find_in_catalog(s)) is None or (byname.same_kind(name, e[0]) and byname.near_size(name, e[0]))),
        key=lambda s: "another size" in s)[:3]
    hint = f" (did you mean {', '.join(sugg)}?)" if sugg else ""
    fix = _fix_command(name)
    if var:
        what = (f"model_name_or_path '{name}' holds the unexpanded shell variable {', '.join(var)}: LLaMA-Factory "
                "reads the path as written, so the run would not find it either; write the expanded path")
        return ModelUnresolved(f"{what}{hint}; or supply the config with {fix}", model=name,
                               missing="an expanded model path", fix=fix)
    unsized = not_sized(name=name)
    tail = f". Even then: {unsized}" if unsized else ""
    # a name no catalogue entry of its family is near (gpt2-medium): say what the doctor takes instead (trial 11)
    folder = "" if hint else " (or the folder that holds it, as --model-config DIR or as model_name_or_path)"
    return ModelUnresolved(f"unknown model '{name}': {', '.join(looked)}{hint}; supply its config with {fix}{folder}"
                           f"{tail}",
                           model=name, missing="the model's config.json", fix=fix)


def read_processor_config(model_dir: Path) -> dict[str, Any] | None:
    """``preprocessor_config.json`` (or ``processor_config.json``) beside a config.json, or None."""
    for nm in ("preprocessor_config.json", "processor_config.json"):
        f = model_dir / nm
        if f.is_file():
            try:
                v = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                return None
            return v if isinstance(v, dict) else None
    return None
