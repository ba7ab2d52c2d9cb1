"""Whether the LLaMA-Factory release in use refuses the training machine's package versions at start-up.

Every release's ``extras/misc.py`` ``check_dependencies`` passes one requirement per package (transformers,
datasets, accelerate, peft, trl) to transformers' ``utils/versions.py`` ``require_version``, which raises
ImportError "REQ is required for a normal functioning of this module, but found PKG==VER." before any key is used.
The ranges, with their file:line, are catalog/lf_stack_ranges.json (scripts/build_lf_stack_ranges.py reads them from
the published wheels 0.8.0-0.9.5 and the main snapshot). Every one of those checks is skipped when the variable
DISABLE_VERSION_CHECK is "1", "true" (or, from 0.9.2 on, "y"), case-insensitive (misc.py `is_env_enabled`).

Only the standard library is imported: `doctor lint` reaches this module.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from finetune_doctor.numbers import parse_version
from finetune_doctor.readers.lfenv import env_enabled

CATALOG = Path(__file__).resolve().parent.parent / "catalog" / "lf_stack_ranges.json"
_CLAUSE = re.compile(r"^(>=|<=|==|!=|>|<|~=)\s*(.+)$")


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The catalogue: {"releases": {version: {"requires": [{package, spec, where, skippable}], ...}}}."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def _parts(version: str) -> tuple[tuple[int, ...], bool] | None:
    """(release numbers, has a pre/dev/post/local suffix) of a version as pip writes it; None when unreadable
    (numbers.parse_version, the one reader of release strings, with every number and the suffix kept)."""
    got = parse_version(version, parts=None, suffix=True)
    return None if got is None else (got[0], bool(got[1]))


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def satisfies(version: str, spec: str) -> bool | None:
    """Whether `version` ("5.2.0") meets `spec` ("transformers>=4.51.0,<=4.57.1", the package name first), as
    packaging compares release numbers (PEP 440: 4.51 == 4.51.0). None when the answer hinges on a pre-release,
    dev or local suffix ("4.57.0.dev0", "2.5.0+cu121" against ==/!=/<=/>= of the same release) or a clause this
    reader does not know (~=), so that no finding rests on a guess."""
    got = _parts(version)
    if got is None:
        return None
    rel, suffixed = got
    ok = True
    for clause in re.sub(r"^[A-Za-z0-9_.\-]+", "", spec).split(","):
        m = _CLAUSE.match(clause.strip())
        want = _parts(m.group(2)) if m else None
        if not m or want is None or m.group(1) == "~=":
            return None
        c = _cmp(rel, want[0])
        if c == 0 and suffixed:
            return None
        op = m.group(1)
        ok = ok and {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "==": c == 0, "!=": c != 0}[op]
    return ok


def disabled(*envs: Mapping[str, str] | None) -> bool:
    """DISABLE_VERSION_CHECK is on for the run in one of `envs` (the --launch file's ``KEY=value`` prefixes and
    ``export`` lines, the --env file's variables). "1" and "true" switch it off on every release, "y" from 0.9.2 on;
    on 0.8.0-0.9.1 "y" does not, but a finding silenced by it is one the user asked to skip."""
    return any(env_enabled("DISABLE_VERSION_CHECK", e or {}) for e in envs)


def launch_env(path: str | None) -> dict[str, str]:
    """The variables the --launch file sets for its training command (readers/config/accelerate.py
    `LaunchCommand.env`); {} without a file or with one that launches nothing (reported where it is read)."""
    if not path:
        return {}
    from finetune_doctor.errors import InputError
    from finetune_doctor.readers.config.accelerate import read_launch_file

    try:
        return dict(read_launch_file(path).env)
    except InputError:
        return {}


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"


def refusals(release: Any, versions: Mapping[str, tuple[str, str]], *envs: Mapping[str, str] | None
             ) -> list[dict[str, Any]]:
    """The ``lint.stack_refusals`` items: one per package of `versions` ({package: (version, where read)}) that
    every judged release of `release` (readers/config/lfrelease.py Release; its ``versions``) refuses at start-up.

    A version between two releases (``release.versions`` its two neighbours) also gets an item when only one of
    them refuses: ``scope`` "some" (else "all"), ``refused_by`` and ``admitted_by`` (the others, each with its
    requirement; one that `satisfies` cannot decide counts as admitting), never ``certain``.

    Each item: package, version, source, spec (the first refusing release's requirement), where (its
    misc.py:line), releases (the judged releases, "0.9.4" or "0.8.0-0.9.6.dev0"), release_source (where the
    release was read), message (transformers' ImportError text for that release), certain (one published release
    read exactly, and not the one installed here weighed against another machine's package: the run stops;
    otherwise every release it may be refuses it). Empty when DISABLE_VERSION_CHECK is on (`disabled`), the release predates the catalogue, or a
    release in the range accepts the version or cannot be judged (`satisfies` None)."""
    if release is None or getattr(release, "older", False) or disabled(*envs):
        return []
    catalog = load()["releases"]
    judged = [v for v in getattr(release, "versions", ()) or () if v in catalog]
    if not judged or len(judged) != len(release.versions):
        return []
    # an error only for one published release read as such: a development build (the main snapshot's ranges are
    # one commit's) or a version mapped to a neighbour ("0.9.7 is newer than the catalog") may require otherwise
    certain = len(judged) == 1 and not getattr(release, "note", "") and "dev" not in judged[0]
    # two bounding releases of a version between them (a development build "0.9.2.dev0", a git version): a refusal
    # only one of them makes is the commit's to decide, an unverified warning (README, `--llamafactory`), not silence
    between = bool(getattr(release, "known", False)) and len(judged) == 2
    out = []
    for pkg in sorted(versions):
        got, source = versions[pkg]
        reqs = [next((r for r in catalog[v]["requires"] if r["package"] == pkg and r["skippable"]), None)
                for v in judged]
        if any(r is None for r in reqs):
            continue
        said = [satisfies(got, r["spec"]) for r in reqs]
        scope = "all" if all(s is False for s in said) else "some" if between and False in said else None
        if scope is None:
            continue
        first = next(r for r, s in zip(reqs, said) if s is False)
        specs = sorted({r["spec"] for r in reqs})
        out.append({"package": pkg, "version": got, "source": source, "spec": first["spec"], "scope": scope, "advice": "range",
                    "given": str(getattr(release, "given", "") or _span(judged)),
                    "refused_by": ", ".join(v for v, s in zip(judged, said) if s is False),
                    "admitted_by": ", ".join(f"{v} ({r['spec']})" for v, r, s in zip(judged, reqs, said)
                                             if s is not False),
                    "specs_text": "; ".join(specs), "where": first["where"], "releases": _span(judged),
                    "message": f"{first['spec']} is required for a normal functioning of this module, but found "
                               f"{pkg}=={got}.",
                    "release_source": getattr(release, "source", "") or "",
                    # the llamafactory installed here judged against another machine's package (--transformers,
                    # --env without an LF line): the training machine may run another release
                    "certain": certain and (getattr(release, "source", "") != "installed here"
                                            or source == "installed here")})
    return out


def stack_refusal_facts(release: Any, opts: Any, env_report: Any, context_stack: Mapping[str, str] | None,
                        hw: Any) -> dict[str, Any]:
    """``{"stack_refusals": [...]}`` for the lint namespace, the versions taken in order of precedence: the
    packages installed here when NVML reads this machine's GPUs (it is the training machine), a ``doctor context``
    file, ``--env FILE``, then ``--transformers``. Nothing is assumed: a package whose version no input gives is
    not judged. DISABLE_VERSION_CHECK is read from the --launch file and the --env file's variables."""
    found: dict[str, tuple[str, str]] = {}
    pkgs = ("transformers", "datasets", "accelerate", "peft", "trl")
    if hw is not None and getattr(hw, "source", None) == "nvml":
        from finetune_doctor.readers.dists import installed_version

        found.update({p: (v, "installed here") for p in pkgs if (v := installed_version(p))})
    found.update({p: (v, "the doctor context") for p, v in (context_stack or {}).items() if p in pkgs and v})
    if env_report is not None:
        found.update({p: (v, env_report.path) for p, v in env_report.versions.items() if p in pkgs})
    if getattr(opts, "transformers_version", None):
        found["transformers"] = (opts.transformers_version, "--transformers")
    env = getattr(env_report, "env", None) if env_report is not None else None
    return {"stack_refusals": refusals(release, found, launch_env(getattr(opts, "launch", None)), env)}


def _first_cap_after(version: str, catalog: Mapping[str, Any]) -> tuple[str, tuple[tuple[int, ...], str]] | None:
    """(release, (numbers, text)) of the transformers ``<=`` bound of the first catalogued release after `version`
    that names one; None when none does."""
    here = _parts(version)
    if here is None:
        return None
    for v in sorted(catalog, key=lambda x: (_parts(x) or ((0,), False))[0]):
        pv = _parts(v)
        if pv is None or _cmp(pv[0], here[0]) <= 0:
            continue
        req = next((r for r in catalog[v]["requires"] if r["package"] == "transformers"), None)
        tops = [c.strip()[2:].strip() for c in re.sub(r"^[A-Za-z0-9_.\-]+", "", (req or {}).get("spec", "")).split(",")
                if c.strip().startswith("<=")]
        got = [(p[0], t) for t in tops if (p := _parts(t)) is not None and not p[1]]
        if got:
            return v, min(got)
    return None


def assumed_transformers(release: Any) -> dict[str, str] | None:
    """The transformers the training machine most likely runs when only its LLaMA-Factory release is known: the
    newest version every judged release's start-up range admits (the smallest ``<=`` bound of their
    ``check_dependencies`` requirements, catalog/lf_stack_ranges.json), since a user who installs that release
    gets pip's newest allowed version. {"version", "spec" (every judged release's requirement, '; '-joined),
    "releases", "release_source"}; None when the release is not known, predates the catalogue, or its ranges
    name no upper bound and no later release names one (then the newest transformers is as likely as any: trial
    5, "a current release" was assumed for LF 0.9.2, which refuses it). A release without a bound (0.8.x) takes the
    bound of the first later release that has one, said so in "spec" (trial 6: 0.8.x was judged on torch 2.8's
    fused AdamW)."""
    if release is None or not getattr(release, "known", False) or getattr(release, "older", False):
        return None
    # a release the user states (--llamafactory, an --env file): the one installed here may not be the training
    # machine's, and a range the config's keys narrow to says nothing about how it was installed
    if getattr(release, "source", "") in ("installed here", "not given", "") or getattr(release, "evidence", ()):
        return None
    catalog = load()["releases"]
    judged = [v for v in getattr(release, "versions", ()) or () if v in catalog]
    if not judged or len(judged) != len(release.versions):
        return None
    bounds: list[tuple[tuple[int, ...], str]] = []
    specs: list[str] = []
    capped: list[str] = []   # how a release without an upper bound was bounded, for the assumption's text
    for v in judged:
        req = next((r for r in catalog[v]["requires"] if r["package"] == "transformers"), None)
        if req is None:
            return None
        specs.append(req["spec"])
        tops = [c.strip()[2:].strip() for c in re.sub(r"^[A-Za-z0-9_.\-]+", "", req["spec"]).split(",")
                if c.strip().startswith("<=")]
        got = [(p[0], t) for t in tops if (p := _parts(t)) is not None and not p[1]]
        if not got:
            later = _first_cap_after(v, catalog)
            if later is None:
                return None
            # LF 0.8.x names no upper bound; the first release that does (0.9.0, <=4.45.0) capped what the code base
            # had run with: a newer transformers is not what an 0.8.x install of its time got (trial 6)
            got = [later[1]]
            capped.append(f"{req['spec']} (no upper bound; {later[0]}, the first release with one, requires "
                          f"<= {later[1][1]})")
        bounds.append(min(got))
    version = min(bounds)[1]
    if any(satisfies(version, s) is not True for s in specs):
        return None
    return {"version": version, "spec": "; ".join(sorted(set(capped) or set(specs))), "releases": _span(judged),
            "release_source": getattr(release, "source", "") or ""}


def admits_from(spec: str, version: str) -> bool | None:
    """Whether some version at or above `version` ("4.49.0") can meet the upper bounds (``<=``, ``<``) of `spec`
    ("transformers>=4.41.2,<=4.46.1"): False when a bound lies below it, so that no release of the package the
    requirement admits is new enough. Lower bounds and ``!=`` exclusions only remove versions and are ignored (a
    range with no upper bound admits everything above). None when `version` or a bound is unreadable."""
    want = _parts(version)
    if want is None:
        return None
    for clause in re.sub(r"^[A-Za-z0-9_.\-]+", "", spec).split(","):
        m = _CLAUSE.match(clause.strip())
        if not m or m.group(1) not in ("<=", "<"):
            continue
        cap = _parts(m.group(2))
        if cap is None:
            return None
        c = _cmp(cap[0], want[0])
        if c < 0 or (c == 0 and m.group(1) == "<"):
            return False
    return True


def first_release_admitting(package: str, version: str, after: str) -> tuple[str, str] | None:
    """(release, its requirement) of the first catalogued LLaMA-Factory release newer than `after` whose start-up
    range admits `package` at `version` or newer (`admits_from`), published releases before the main snapshot's
    development version; None when none does (catalog/lf_stack_ranges.json)."""
    catalog = load()["releases"]
    here = _parts(after)
    if here is None:
        return None
    order = sorted(catalog, key=lambda v: (_parts(v) or ((0,), False))[0])
    for v in sorted(order, key=lambda v: "dev" in v):
        pv = _parts(v)
        if pv is None or _cmp(pv[0], here[0]) <= 0:
            continue
        req = next((r for r in catalog[v]["requires"] if r["package"] == package), None)
        if req is not None and admits_from(req["spec"], version):
            return v, req["spec"]
    return None
