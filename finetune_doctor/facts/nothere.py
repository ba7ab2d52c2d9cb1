"""What the doctor cannot see from this machine but the training machine can: a model named by a local path that
is not here, or a hub id this machine cannot fetch. For ``check`` and ``estimate`` model-unresolved (FD607, error)
reports it, since the run is left without a verdict; ``lint`` makes it a ``not_here`` key
(rules/not-checked-here.yaml, info) unless --strict, where FD607 reports it."""

from __future__ import annotations

from typing import Any

# the `condition` of a not-checked-here key: a path, or a hub id this machine cannot fetch
PATH_NOT_HERE = "not on this machine"
HUB_NOT_HERE = "not fetchable from this machine"


def model_not_here(asm: Any, *, sizes: bool = False) -> None:
    """An unresolved model named by a local path (absolute, ``./``, ``../``, ``~``) that is not on this machine: the
    training machine may hold it, so for ``lint`` it is not-checked-here (info) unless --strict (model-unresolved),
and for ``check``/``estimate`` model-unresolved (see `sizes`). A name that
    could be a hub id (``org/name``) stays model-unresolved when this machine could ask the hub and did not find
    it; when it could not ask (--offline, HF_HUB_OFFLINE=1, no network) it is not checked here too.

    `sizes` (``check``/``estimate``, commands whose answer is the memory verdict): the model not being here leaves
    the run with no verdict, which model-unresolved (FD607, error) says, whatever the reason the model is not
    sized (trial 16: an unfetchable hub id exited 0 with "0 errors" and no estimate while a bare folder name
    exited 1), so no not-checked-here key is added for it; ``lint`` (no verdict to give) keeps the info."""
    import os

    unresolved = asm.facts["lint"].get("model_unresolved")
    if not unresolved:
        return
    name = str(unresolved.get("name") or "")
    from finetune_doctor.readers.model.modelcfg import FOLDER_WORDS

    # a hub id is exactly owner/name: three parts, or an owner that is a folder word (LF's `models/llama3-8b-pro`),
    # name a folder as surely as a leading "/" does
    parts = name.replace("\\", "/").split("/")
    local = (name.startswith(("/", "./", "../", "~")) or (len(name) > 2 and name[1] == ":" and name[2] in "\\/")
             or len(parts) > 2 or (len(parts) == 2 and parts[0].lower() in FOLDER_WORDS))
    here = os.path.exists(os.path.expanduser(name))
    # a hub id this machine could not fetch (--offline, HF_HUB_OFFLINE, no network: readers/model/hub.py) is as
    # unknowable here as a folder of the training machine: not checked here, unless --strict (trial 5: an
    # air-gapped CI failed a fine config on it)
    unfetched = any(w in str(unresolved.get("message") or "") for w in ("no network:", "no download (--offline",
                                                                          "no download (HF_HUB_OFFLINE"))
    unresolved["not_here"] = bool((local and not here) or unfetched)
    # a config.json that was found and parsed but lacks a field where the doctor's reader looks for it (readers/
    # model/configjson.py "config.json ... has no 'X'"): the reader's limit, not the user's error (trial 9: an
    # InternVL-Chat config whose decoder sits under llm_config was an FD607 error, exit 1)
    unresolved["parse_limit"] = bool(unresolved.get("config_json")) and " has no '" in str(
        unresolved.get("message") or "")
    unresolved["why"] = ("parse-limit" if unresolved["parse_limit"] else "hub-not-here" if unfetched and not local
                         else "path-not-here" if unresolved["not_here"] else "unknown")
    if unresolved["not_here"] and not sizes:
        doc = asm.doc
        asm.facts["lint"]["keys"].append({
            "key": "model_name_or_path", "kind": "not_here", "message": unresolved["message"],
            "suggestion": None, "replacement": None, "fix": None, "fix_value": None,
            "condition": HUB_NOT_HERE if unfetched and not local else PATH_NOT_HERE,
            "line": doc.line_of("model_name_or_path"), "override": "model_name_or_path" in doc.overrides})
