"""Which LLaMA-Factory release a config is judged for, and what that release reads.

The data is ``finetune_doctor/catalog/lf_releases.json``, built by ``scripts/build_lf_releases.py`` from LF's own
published wheels (0.8.0 ... 0.9.5, ``pip download --no-deps llamafactory==X``) and the source snapshot (0.9.6.dev0,
"main"): for every key an argument dataclass declares (``hparams/*.py``), the releases that declare it, its closed
choices and defaults per release; for every chat template (``data/template.py`` ``register_template``), the releases
that register it.

`choose(version)` maps a version string to a `Release`:

* a published version or the snapshot's ("0.9.5", "0.9.6.dev0", "main") -> that release;
* a version between two catalogued ones (0.8.4 was never on PyPI but is what a git install between 0.8.3 and
  0.9.0 reports), or a development build of a catalogued release ("0.9.2.dev0", what ``llamafactory-cli env``
  prints for a git install after 0.9.1) -> both neighbours: a key or value only one of them declares is a warning
  (readers/config/keyschema.py gives it the condition of the neighbour that lacks it), neither error nor silence;
* newer than the snapshot -> the snapshot, with a note; older than 0.8.0 -> `older` True: the catalogue does not
  know that release's keys or templates, so facts/lint.py judges none of them (trial 4: 0.6.3 was judged as 0.8.0
  and its `cache_path` called "last accepted in v0.6", a fix that release rejects offered as safe);
* None or unreadable -> every catalogued release (the union), ``known`` False: nothing that some release accepts is
  an error.

`version_in_use(flag, env_versions)` picks the version the way the doctor's flags rank it: ``--llamafactory``, then
``--env`` (``llamafactory-cli env`` prints "`llamafactory` version"), then the llamafactory package installed here
(importlib.metadata: read from the package's metadata, never imported), else None.

Pure Python; the JSON is read once.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from finetune_doctor.numbers import is_prerelease, parse_version

CATALOG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "catalog", "lf_releases.json")
MAIN_ALIASES = ("main", "master", "head", "snapshot")


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The release catalog as JSON data (raises only for a broken install: the file ships with the package)."""
    from finetune_doctor.fsutil import bundled_json   # a marshal copy: ~1/3 of json.load's time (issue #22)

    return bundled_json(CATALOG)  # type: ignore[return-value]


@lru_cache(maxsize=8192)
def parse_ranges(text: str) -> frozenset[int]:
    """The release indices a range text of the catalog names (``"0-3,7"`` -> {0, 1, 2, 3, 7}; indices into
    ``load()["versions"]``, the form catalog/lf_releases.json and the v1 key tables in catalog/lf_keys.json use).
    Raises ValueError for a part that is not a number or a range. The one reading of that form: lfv1.py asks it
    too (issue #22)."""
    # memoized (the answer is frozen): a lint asks about every key of every config, ~20 per file
    out: set[int] = set()
    for part in str(text).split(","):
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return frozenset(out)


def _vtuple(v: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an LF version, patch 0 when not written; None without at least major.minor
    (numbers.parse_version reads it; a suffix such as ``.dev0`` is `_prerelease`'s)."""
    got = parse_version(v)
    if got is None or len(got) < 2:
        return None
    return got + (0,) * (3 - len(got))


@dataclass(frozen=True)
class Release:
    """The release(s) a config is judged against.

    `given` is the version as read (None: not known); `versions` the catalogued releases it stands for (one, two
    neighbours, or all of them); `known` whether the version was read at all; `source` where it was read
    (``--llamafactory``, the --env file, ``installed here``, or ``not given``); `note` how an uncatalogued version
    was mapped (empty when exact). `evidence` and `conflict`: see readers/config/lfnarrow.py.
    """

    given: str | None
    versions: tuple[str, ...]
    known: bool
    source: str = "not given"
    note: str = ""
    older: bool = False   # the version predates the catalogue's first release: its keys are not known here
    # set by readers/config/lfnarrow.py when the version is not known: the keys that narrowed the selection, and
    # the keys that exist together in no catalogued release, each with the releases declaring it ("0.9.2-0.9.6.dev0")
    evidence: tuple[tuple[str, str], ...] = ()
    conflict: tuple[tuple[str, str], ...] = ()

    @property
    def conflict_keys(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.conflict)

    @property
    def indices(self) -> frozenset[int]:
        allv = load()["versions"]
        return frozenset(allv.index(v) for v in self.versions)

    @property
    def label(self) -> str:
        """How a message names it: "LLaMA-Factory 0.9.5", "LLaMA-Factory 0.8.3-0.9.0", "any LLaMA-Factory release"."""
        if not self.known:
            return "any LLaMA-Factory release from " + self.versions[0] + " to " + self.versions[-1]
        if len(self.versions) == 1:
            return f"LLaMA-Factory {self.versions[0]}"
        return f"LLaMA-Factory {self.versions[0]}-{self.versions[-1]}"

    def has_key(self, key: str) -> bool:
        """Some release of this selection declares `key` in an argument dataclass (init field)."""
        e = load()["keys"].get(key)
        return e is not None and bool(parse_ranges(e["in"]) & self.indices)

    def key_versions(self, key: str) -> list[str]:
        """Every catalogued release that declares `key` (for messages: "added in 0.9.3")."""
        e = load()["keys"].get(key)
        allv = load()["versions"]
        return [allv[i] for i in sorted(parse_ranges(e["in"]))] if e else []

    def choices(self, key: str) -> list[Any] | None:
        """The union of `key`'s closed choices over the selection, None when some release leaves it open."""
        e = load()["keys"].get(key)
        if e is None or "choices" not in e:
            return None
        per = _per_release(e["choices"], load()["versions"])
        has = parse_ranges(e["in"])
        out: list[Any] = []
        for i in sorted(self.indices & has):
            ch = per.get(i)
            if ch is None:
                return None
            out += [c for c in ch if c not in out]
        return out or None

    def default(self, key: str) -> Any:
        """`key`'s default in the newest release of the selection that declares it (None when none does)."""
        e = load()["keys"].get(key)
        if e is None:
            return None
        per = _per_release(e.get("default", {}), load()["versions"])
        idx = sorted(self.indices & parse_ranges(e["in"]))
        return per.get(idx[-1]) if idx else None

    @property
    def has_v1(self) -> bool:
        """Some release of this selection ships v1 (a ``llamafactory/v1`` package that ``USE_V1=1`` selects)."""
        return bool(v1_releases_indices() & self.indices)

    def suffix_versions(self, suffix: str) -> list[str]:
        """The releases of this selection whose ``read_args`` loads a config file ending in `suffix` (".yaml",
        ".yml", ".json"; catalog ``config_suffixes``, from hparams/parser.py of each wheel): 0.8.0-0.9.0 test
        ``sys.argv[1].endswith(".yaml")`` and ".json" only, so a ``.yml`` file goes to the argument parser as a
        bare argument (hiyouga/LlamaFactory#5604). A catalog without the table: every release of the selection."""
        table = load().get("config_suffixes")
        if table is None:
            return list(self.versions)
        allv = load()["versions"]
        has = parse_ranges(table.get(suffix.lower(), ""))
        return [allv[i] for i in sorted(self.indices & has)]

    def has_template(self, name: str) -> bool:
        t = load()["templates"].get(name)
        return t is not None and bool(parse_ranges(t) & self.indices)

    def template_versions(self, name: str) -> list[str]:
        t = load()["templates"].get(name)
        allv = load()["versions"]
        return [allv[i] for i in sorted(parse_ranges(t))] if t else []


def _per_release(compact: dict[str, Any], versions: list[str]) -> dict[int, Any]:
    """Expand the catalog's change points ({"3": v, "7": w}) to one value per release index."""
    out: dict[int, Any] = {}
    cur: Any = None
    have = False
    for i in range(len(versions)):
        if str(i) in compact:
            cur, have = compact[str(i)], True
        if have:
            out[i] = cur
    return out


def choose(version: str | None, source: str = "not given") -> Release:
    """The `Release` a version string stands for (see the module docstring). Never raises."""
    allv = load()["versions"]
    if not version or not str(version).strip():
        return Release(None, tuple(allv), False, source)
    v = str(version).strip()
    if v.lower() in MAIN_ALIASES:
        return Release(v, (allv[-1],), True, source)
    if v in allv:
        return Release(v, (v,), True, source)
    want = _vtuple(v)
    if want is None:
        return Release(v, tuple(allv), False, source, note=f"`{v}` is not a version number: judged for every release")
    tuples = [_vtuple(x) for x in allv]
    if want > tuples[-1]:
        return Release(v, (allv[-1],), True, source, note=f"{v} is newer than the catalog: judged as {allv[-1]}")
    if want < tuples[0]:
        return Release(v, (allv[0],), True, source, older=True,
                       note=f"the doctor knows LLaMA-Factory releases from {allv[0]}; keys are not judged for {v}")
    for i, t in enumerate(tuples):
        if t == want and i > 0 and _prerelease(v) and not _prerelease(allv[i]):
            # "0.9.2.dev0" is what a git install prints between the 0.9.1 and 0.9.2 tags (LF's setup.py reads
            # extras/env.py VERSION, bumped to X.Y.Z.dev0 right after the X.Y.(Z-1) release): a key added for
            # 0.9.2 may or may not be in that commit (hiyouga/LlamaFactory#7677 stopped on 0.9.2's keys)
            pair = (allv[i - 1], allv[i])
            return Release(v, pair, True, source,
                           note=f"{v} is a development build before {allv[i]}: judged by {pair[0]} and {pair[1]}")
        if t == want:   # "0.9.5.post1", "0.9.6.dev3": the release with the same number
            return Release(v, (allv[i],), True, source)
    lo = max(i for i, t in enumerate(tuples) if t < want)
    pair = (allv[lo], allv[lo + 1])
    return Release(v, pair, True, source,
                   note=f"{v} is no published release: judged by {pair[0]} and {pair[1]}, the releases around it")


def _prerelease(v: str) -> bool:
    """`v` is a PEP 440 pre- or development release ("0.9.2.dev0", "0.9.3rc1"), which sorts before its number
    (numbers.is_prerelease on the suffix numbers.parse_version leaves)."""
    got = parse_version(v, suffix=True)
    return got is not None and is_prerelease(got[1])


# what the `lf-version` assumption (facts/kinds.py) says when the release is the llamafactory installed on this
# machine (trial 17: a test install of LLaMA-Factory in the user's venv silently became the training machine's)
INSTALLED_HERE_NOTE = ("read from the LLaMA-Factory installed here, which judges the config's keys, templates and "
                       "defaults; if training runs elsewhere, pass --llamafactory")
INSTALLED_HERE_WHY = ("the llamafactory installed here, taken as the training machine's: a key or template it lacks "
                      "is an error; without it they are judged over every release the config's keys admit")


def installed_version() -> str | None:
    """The llamafactory version installed here, from its package metadata (no import), else None
    (readers/dists.py, the one home of installed versions)."""
    from finetune_doctor.readers.dists import installed_version as found

    return found("llamafactory")


def version_in_use(flag: str | None, env_versions: dict[str, str] | None = None,
                   env_path: str | None = None, *, use_installed: bool = True) -> Release:
    """The `Release` of the training machine: ``--llamafactory``, then ``--env``, then the installed package."""
    if flag:
        return choose(flag, "--llamafactory")
    if env_versions and env_versions.get("llamafactory"):
        return choose(env_versions["llamafactory"], env_path or "--env")
    if use_installed:
        got = installed_version()
        if got:
            return choose(got, "installed here")
    return choose(None)


def v1_releases_indices() -> frozenset[int]:
    """Indices into ``versions`` of the releases that ship v1 (catalog ``v1.in``, from the wheels' contents)."""
    return parse_ranges(load()["v1"].get("in", ""))


def v1_releases() -> tuple[str, ...]:
    """The catalogued releases that ship v1, oldest first: ("0.9.4", "0.9.5", "0.9.6.dev0") at this catalog --
    ``llamafactory/v1/`` and ``USE_V1`` in ``cli.py`` first appear in the 0.9.4 wheel (scripts/build_lf_releases.py)."""
    allv = load()["versions"]
    return tuple(allv[i] for i in sorted(v1_releases_indices()))


def v1_catalog() -> dict[str, Any]:
    """The v1 argument classes' fields (``fields``) and registered plugin names (``plugins``) at the snapshot."""
    return load()["v1"]


PRE_CLI_SCRIPT = re.compile(r"(?:^|[\s/])train_bash\.py\b")
"""LLaMA-Factory's training entry point before ``llamafactory-cli``: ``src/train_bash.py`` was renamed ``src/train.py``
in May 2024 (hiyouga/LlamaFactory#3624, 2024-05-08: "改名成 train 了"), before 0.8.0 (June 2024), the catalogue's
first release."""


def with_launch(release: Release, launch: str | None) -> Release:
    """`release`, or -- when no version was stated (not given, or only the one installed here) and the `launch` line
    runs ``train_bash.py`` (`PRE_CLI_SCRIPT`) -- a release older than the catalogue (`Release.older`): its keys are
    not judged (trial 4, LlamaFactory#2926: `cache_path`, a key of that release, was called renamed)."""
    if not launch or not PRE_CLI_SCRIPT.search(launch):
        return release
    if release.known and release.source != "installed here":
        return release   # a stated version wins over what the launch line implies
    first = load()["versions"][0]
    return Release("before 0.8.0", (first,), True, "the launch line (src/train_bash.py)", older=True,
                   note=f"the launch runs src/train_bash.py, LLaMA-Factory's entry point before {first}: the doctor "
                        f"knows releases from {first}; keys are not judged for that release")
