"""Checkpoint saves that failed: transformers' staged checkpoint save, and a save said to fail in words.

transformers' Trainer has saved checkpoints in two steps in some releases: write everything into a staging folder
(``tmp-checkpoint-N``, later ``tmp-checkpoint-<random>``), then rename it to ``checkpoint-N`` (and remove what is
left of the staging folder). Where more than one process did the rename or the clean-up, the second one found the
folder gone or the target already there:

- 4.36.x: ``Trainer._save_checkpoint`` ran ``os.rename(staging_output_dir, output_dir)`` on every process
  (huggingface/transformers#27925, on 4.36.0.dev0: FileNotFoundError on the ranks that came second; #28119 on
  4.36.1); #28364 (in 4.37.0) renames on the main process only.
- 4.38.0 and 4.38.1: a clean-up of the staging folder, ``shutil.rmtree(staging_output_dir)`` on each node (#28848),
  failing in shutil's frames while another process renamed it; reverted by #29336 (in 4.38.2).
- 4.49.0.dev0 (transformers' main in February 2025): ``os.renames(output_dir, checkpoint_dir)`` of a
  ``tmp-checkpoint-<random>`` folder raised ``OSError: [Errno 39] Directory not empty`` under DDP
  (huggingface/transformers#36076, trl#2928, ms-swift#3031); fixed on main before 4.49.0.

What the doctor reads: a traceback cut inside those frames (`staged_save_lead`: ``_save_checkpoint`` with a code
line naming the staging folder, or a rename/rmtree under it), an exception line whose errno is a rename's (2, 17,
39) said in a save (`staged_save_error`: the paths may be cut off; readings with the paths are crashcause.py
``_rename_race``), and the user's words that a save failed (`said_save_lead`). The transformers release, where the
logs or the words give it, picks the episode; without it every episode is named with `pip show transformers`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Mapping

from finetune_doctor.analyzers.postmortem import knownbugs
from finetune_doctor.numbers import version_key

# each episode's words, keyed by the catalogue row's `save_episode` (catalog/known_regressions.json holds its first
# and last affected release and the release that fixed it; {first}, {last}, {series} (first's major.minor) and
# {fixed} come from there): what it did, its fix, the release before it to go back to, and what the episode is
# called in the fix of every episode (`_episodes`)
_WORDS: dict[str, dict[str, str]] = {
    "rename": {"what": "transformers {series} renamed tmp-checkpoint-N to checkpoint-N from every process "
                       "(huggingface/transformers#27925, #28119; {fixed} renames on the main process only, #28364)",
               "fix": "upgrade transformers to {fixed} or later (or go back to {before})", "before": "4.35.2",
               "called": "{series}'s rename"},
    "rmtree": {"what": "transformers {first}-{last} removed the staging folder with shutil.rmtree(staging_output_dir) "
                       "on each node while another process renamed it (#28848, reverted in {fixed} by #29336)",
               "fix": "upgrade transformers to {fixed} or later (or go back to {before})", "before": "4.37.2",
               "called": "{series}'s clean-up"},
}
# the dev build of February 2025, which no release shipped (so the catalogue of releases has no row for it):
# huggingface/transformers#36076, trl#2928, ms-swift#3031; fixed on main before the 4.49.0 release
_DEV_BUILD: tuple[str, str, str, str, str] = (
    "4.49.0.dev0", "4.49.0.dev0",
    "transformers 4.49.0.dev0 (main in February 2025) renamed a tmp-checkpoint-<random> folder with os.renames from "
    "more than one process: OSError [Errno 39] Directory not empty (huggingface/transformers#36076; fixed on main "
    "before 4.49.0)",
    "install the transformers 4.49.0 release or later instead of that build of main", "4.49.0 for the dev build's rename")

# the fix of every episode says "or later" once, after its first release
_LATER = {True: " or later", False: ""}

Episode = tuple[str, str, str, str]
"""(first, last, what it did, its fix): transformers releases, inclusive, as version_key compares them."""


@lru_cache(maxsize=1)
def _episodes() -> tuple[tuple[Episode, ...], str]:
    """The staged-save episodes, oldest first — the catalogue's rows marked `save_episode` (knownbugs.rows(), read
    from catalog/known_regressions.json: their releases) worded by `_WORDS`, then the dev build's — and the fix of
    every episode, for when no release is known. KeyError where a marked row has no words here (a test pins both
    ways)."""
    eps: list[Episode] = []
    called: list[str] = []
    for r in knownbugs.rows():
        if r.get("package") != "transformers" or not r.get("save_episode"):
            continue
        w = _WORDS[r["save_episode"]]
        fill = {"first": r["first"], "last": r["last"], "fixed": r["fixed_in"], "before": w["before"],
                "series": ".".join(r["first"].split(".")[:2])}
        eps.append((r["first"], r["last"], w["what"].format(**fill), w["fix"].format(**fill)))
        called.append(f"{r['fixed_in']}{_LATER[not called]} for {w['called'].format(**fill)}")
    eps.append(_DEV_BUILD[:4])
    called.append(_DEV_BUILD[4])
    fix_all = (f"upgrade transformers past the episode ({', '.join(called)}) or go back to the release before it")
    return tuple(eps), fix_all


_ONE_WRITER = ("until then save from one writer (save_on_each_node: false on a shared filesystem, each rank's "
               "output_dir not shared by several jobs)")

# a rename/remove errno: ENOENT (the folder already gone), EEXIST and ENOTEMPTY (the target already there)
# (CPython raises ENOENT as FileNotFoundError and EEXIST as FileExistsError: a title may name only the class)
_ERRNO = re.compile(r"\[Errno (?:2|17|39)\]|Directory not empty|File exists|\bFileNotFoundError\b|\bFileExistsError\b")
_STAGING = re.compile(r"staging_output_dir|tmp-checkpoint")
_SAVE_WORDS = re.compile(r"\bsav(?:e|es|ed|ing)\b|\bckpt\b|\bcheckpoint|保存|存储模型", re.I)
_FINAL = re.compile(r"\bfinal\b|\blast\b|\bend of training\b|\bafter training\b|最后|最终|训练(?:完成|结束)", re.I)


# signs of a build of transformers' main rather than a release: the user's words ("main branch", "installed from
# source", a git+ URL, a .dev0 version), the dev build's own code line (4.49.0.dev0 trainer.py:3157) or its staging
# folder, named by tempfile.mkdtemp(prefix="tmp-checkpoint-") with a random suffix (huggingface/transformers#35580)
# where the releases' is tmp-checkpoint-<step> (trial 16, ms-swift#3031)
_MAIN_BUILD = re.compile(r"\bmain branch\b|\bfrom (?:source|github|git)\b|git\+https://github\.com/huggingface/transformers|"
                         r"\bdev0\b|os\.renames\(output_dir, checkpoint_dir\)|tmp-checkpoint-(?=\w*[a-z_])\w{8}\b|"
                         r"主分支|源码安装", re.I)


def _episode(versions: Mapping[str, tuple[str, str]], said: Mapping[str, str] | None = None,
             seen: str = "") -> tuple[str | None, str, Episode | None]:
    """(release, where it was read, its episode or None) for the transformers release read (`versions`: {package:
    (version, where read)}) or said (`said`: {package: version}); with no release, a build of main that `seen`
    (the words and code lines read) shows (`_MAIN_BUILD`) is the dev build's episode."""
    v = versions.get("transformers")
    ver, where = (v[0], f"read at {v[1]}") if v else ((said or {}).get("transformers"), "the words state it")
    main = _MAIN_BUILD.search(seen) if not ver else None
    if main:
        ver, where = _DEV_BUILD[0], f"a build of main: \"{main.group(0)}\""
    key = version_key(ver) if ver else None
    episode = next((e for e in _episodes()[0]
                    if key is not None and version_key(e[0]) <= key <= version_key(e[1])), None)
    return ver, where, episode


def _episode_words(versions: Mapping[str, tuple[str, str]], said: Mapping[str, str] | None = None,
                   seen: str = "", episodes: tuple[Episode, ...] | None = None) -> str:
    """The episode the transformers release falls in (`_episode`), worded with where it was read; every episode
    of `episodes` (default: all of `_episodes`) when none is known or none matches (the release is then what to
    check)."""
    ver, where, episode = _episode(versions, said, seen)
    if episode is not None:
        return f"transformers {ver} ({where}) is in the affected releases: {episode[2]}"
    known = version_key(ver) if ver else None
    lead = f"transformers {ver} ({where}) is in none of them, so another writer is likelier; " if known else ""
    return (f"{lead}the releases that did it: " + "; ".join(e[2] for e in episodes or _episodes()[0])
            + ("" if known else " (`pip show transformers` says which is installed)"))


def rename_history(versions: Mapping[str, tuple[str, str]], seen: str = "") -> str:
    """For a rename of a ``tmp-checkpoint-*`` folder whose paths are read (crashcause.py ``_rename_race``): which
    episode of transformers' staged save the release read (`versions`) or the build `seen` shows falls in, and its
    fix, by the same comparison as a cut traceback's (`_episode`: a release, or a dev build, after an episode's
    fixing release is in none of them; trial 16: 4.49.0.dev0 was told that a release with 4.37.0's fix ends it)."""
    # a staging folder named by its step (tmp-checkpoint-81) is the releases' naming, never the dev build's
    numbered = re.search(r"tmp-checkpoint-\d+\b", seen) is not None
    episodes = tuple(e for e in _episodes()[0] if not (numbered and e[0].endswith(".dev0") and e[0] == e[1]))
    return f"{_episode_words(versions, None, seen, episodes)}; the fix: {_fix(versions, None, seen)}"


STAGED = "the checkpoint save failed in transformers' staged save"
"""The opening of every staged-save reading (causes.py tells its lead's kind by it: cutcause.lead_kind)."""


def _staged_text(versions: Mapping[str, tuple[str, str]], said: Mapping[str, str] | None = None,
                 seen: str = "") -> str:
    return (f"{STAGED} (Trainer._save_checkpoint writes a "
            "tmp-checkpoint folder, then renames it to checkpoint-N): a second process renamed or removed the "
            f"same folder; {_episode_words(versions, said, seen)}; the fix: {_fix(versions, said, seen)}")


def _fix(versions: Mapping[str, tuple[str, str]], said: Mapping[str, str] | None = None, seen: str = "") -> str:
    """The known episode's own fix, or every episode's (`_episodes`) when no release is known; then the one-writer
    stopgap. A release known to be in none of them (a dev build after an episode's fixing release has its fix,
    trial 16) gets the one-writer fix alone: no transformers to change."""
    ver, _, episode = _episode(versions, said, seen)
    if episode is None and ver and version_key(ver) is not None:
        return _ONE_WRITER.replace("until then ", "", 1)
    return f"{episode[3] if episode is not None else _episodes()[1]}; {_ONE_WRITER}"


def staged_save_lead(tb: Any, versions: Mapping[str, tuple[str, str]]) -> str | None:
    """Words for a traceback cut before its exception line inside transformers' staged save (`tb`: the
    traceback Notice whose value holds ``frames``, "func (file.py)" entries with their code lines, outermost
    first): a ``_save_checkpoint (trainer.py)`` frame followed by a code line naming the staging folder
    (``staging_output_dir``, ``tmp-checkpoint``) or by os's rename/shutil's rmtree frames. None otherwise."""
    v = tb.value if tb is not None and isinstance(tb.value, dict) else {}
    frames = [x for x in (v.get("frames") or ()) if isinstance(x, str)]
    at = next((i for i, x in enumerate(frames) if x.startswith("_save_checkpoint (trainer.py)")), None)
    if at is None:
        return None
    below = frames[at + 1:]
    if not any(_STAGING.search(x) or x.startswith(("rmtree (shutil.py)", "renames (", "rename (")) for x in below):
        return None
    return _staged_text(versions, seen="\n".join(below))


def words_beside(ev: Any, exc: Any) -> str:
    """The user's words of the short file that holds the exception line `exc` (a Notice): its
    ``FileEvidence.said`` text ("when save ckpt, got error: OSError ..."), which the line reader cuts off; "" for
    a log."""
    said = next((f.said for f in ev.files if f.said and f.read.path == exc.file), None)
    return str((said or {}).get("text") or "")


def staged_save_error(cls: str, msg: str, frames: tuple, versions: Mapping[str, tuple[str, str]], words: str = "",
                      line: str = "") -> str | None:
    """Words for an exception that a staged save's second writer raises (`cls` OSError, FileNotFoundError or
    FileExistsError with a rename's errno, `_ERRNO`) when the paths that would show the staging folder are cut
    off: its traceback (`frames`) runs through ``_save_checkpoint``, or the exception line (`line`) names the
    staging folder, or — for a target already there (Errno 39/17), not a missing file — the user's words around
    it (`words`) say it was a save. A path that merely holds "checkpoint" (a resume from a missing folder) is no
    save. None otherwise."""
    if cls not in ("OSError", "FileNotFoundError", "FileExistsError") or not _ERRNO.search(msg):
        return None
    in_save = any(str(x).startswith("_save_checkpoint (") for x in frames)
    said_save = "[Errno 2]" not in msg and bool(_SAVE_WORDS.search(words))
    if not (in_save or _STAGING.search(line) or _STAGING.search(msg) or said_save):
        return None
    return _staged_text(versions, seen="\n".join([words, line, *map(str, frames)]))


def staged_said(said: Mapping[str, Any]) -> bool:
    """True when words of a failed save (phase save, symptom error or version) quote a rename's errno or class or
    the staging folder: the staged save's reading (`said_save_lead`'s first branch), which outranks any other lead."""
    text = str(said.get("text") or "")
    return (said.get("phase") == "save" and said.get("symptom") in ("error", "version")
            and bool(_ERRNO.search(text) or _STAGING.search(text)))


def said_save_lead(said: Mapping[str, Any], versions: Mapping[str, str]) -> str | None:
    """What the user's words of a failed save support (`said`: userwords.read_words' answer with phase save;
    `versions`: {package: version} the words state): transformers' staged save when the words quote a rename's
    errno or the staging folder, else which save it was — the final one (after the loop: Trainer.save_model, the
    whole model gathered on one process under ZeRO-3/FSDP/Megatron, while the intermediate saves may have kept
    only what `save_only_model` keeps) or one at `save_steps` — and what to give. None when the phase is not
    save or the symptom is no error."""
    if said.get("phase") != "save" or said.get("symptom") not in ("error", "version"):
        return None
    text = str(said.get("text") or "")
    if _ERRNO.search(text) or _STAGING.search(text):
        return "From the words: " + _staged_text({}, versions, text) + "."
    if _FINAL.search(text):
        return ("From the words: it was the final save (after the training loop: the trainer's save_model, which "
                "gathers the whole model on one process under ZeRO-3, FSDP or Megatron, where the intermediate "
                "saves may have written shards or only what save_only_model keeps); a bug of that trainer "
                "release's final save, the gathered model not fitting one process's memory, and the disk are "
                "what to tell apart: its traceback says which, and the trainer's release notes whether a later "
                "release fixed its final save.")
    return ("From the words: the failure was in a checkpoint save at save_steps; the traceback's innermost frames "
            "tell the writer (transformers' staged tmp-checkpoint rename, the disk, the gathered weights) apart.")
