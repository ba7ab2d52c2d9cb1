"""The pre-commit hooks, end to end with pre-commit itself.

A temporary hook repository holds a copy of this project (the package, the rule pack, pyproject.toml and
.pre-commit-hooks.yaml) committed once; a temporary training-config repository installs the hook from it by path
and commit hash, the way a team would from GitHub. pre-commit builds the hook's own virtualenv with pip, which needs the dependencies (click, rich, ruamel.yaml,
simpleeval, nvidia-ml-py, pathspec, hatchling) from an index: with no network, pip's configuration must name a mirror
or a wheelhouse (PIP_INDEX_URL, or PIP_NO_INDEX=1 with PIP_FIND_LINKS), which these tests inherit from the
environment. The README's own snippet is run verbatim (but for the URL) against a fresh, untagged clone.

Checked: committing a LLaMA-Factory config with a renamed key is blocked and the hook prints the finding; the
corrected config commits. The fix hook rewrites the key in place (comment kept), blocks that commit as pre-commit does
for a modifying hook, and the re-staged file commits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_PATHS = ("pyproject.toml", "README.md", "LICENSE", ".pre-commit-hooks.yaml", "finetune_doctor", "rules")

BAD_CONFIG = """\
### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct

### method
stage: dpo
do_train: true
finetuning_type: lora
lora_target: all
dpo_beta: 0.1  # from an old tutorial

### dataset
dataset: dpo_en_demo
template: qwen
cutoff_len: 2048

### output
output_dir: saves/qwen2.5-7b/lora/dpo
logging_steps: 10

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 5.0e-6
num_train_epochs: 3.0
bf16: true
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("precommit-home")
    e = dict(os.environ)
    e.update({
        "PRE_COMMIT_HOME": str(home / "cache"),
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1",
        "PRE_COMMIT_COLOR": "never", "NO_COLOR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    (home / "gitconfig").write_text("[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n")
    return e


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory, env) -> tuple[Path, str]:
    """A git repository holding this project's current files, committed; returns (path, commit hash)."""
    repo = tmp_path_factory.mktemp("hook-repo")
    for name in PACKAGE_PATHS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.is_file():
            shutil.copy2(src, repo / name)
    assert (repo / ".pre-commit-hooks.yaml").is_file()
    _run(["git", "init", "-q"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-q", "-m", "finetune-doctor under test"], repo, env)
    rev = _run(["git", "rev-parse", "HEAD"], repo, env).stdout.strip()
    return repo, rev


def _consumer(tmp_path: Path, env: dict[str, str], hook_repo: tuple[Path, str], hook_id: str) -> Path:
    repo = tmp_path / "configs"
    repo.mkdir()
    path, rev = hook_repo
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {path}\n    rev: {rev}\n    hooks:\n      - id: {hook_id}\n")
    _run(["git", "init", "-q"], repo, env)
    _run([sys.executable, "-m", "pre_commit", "install"], repo, env)
    _run(["git", "add", ".pre-commit-config.yaml"], repo, env)
    # the config file alone has no YAML the hook wants: this first commit also builds the hook environment
    _run(["git", "commit", "-q", "-m", "pre-commit config"], repo, env)
    return repo


def test_manifest_is_valid():
    res = subprocess.run([sys.executable, "-m", "pre_commit", "validate-manifest",
                          str(ROOT / ".pre-commit-hooks.yaml")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_lint_hook_blocks_a_bad_config_and_passes_the_fixed_one(tmp_path, env, hook_repo):
    repo = _consumer(tmp_path, env, hook_repo, "finetune-doctor")
    cfg = repo / "configs" / "qwen_dpo.yaml"
    cfg.parent.mkdir()
    cfg.write_text(BAD_CONFIG)
    (repo / "notes.json").write_text('{"not": "a training config"}\n')  # skipped silently
    _run(["git", "add", "-A"], repo, env)
    res = _run(["git", "commit", "-m", "add dpo config"], repo, env, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "finetune-doctor (lint)" in out and "Failed" in out
    assert "dpo_beta" in out and "pref_beta" in out and "FD002" in out
    # nothing was committed
    assert _run(["git", "log", "--oneline"], repo, env).stdout.count("\n") == 1

    cfg.write_text(BAD_CONFIG.replace("dpo_beta:", "pref_beta:"))
    _run(["git", "add", "-A"], repo, env)
    res = _run(["git", "commit", "-m", "add dpo config"], repo, env, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "finetune-doctor (lint)" in out and "Passed" in out


def test_fix_hook_rewrites_the_key_and_the_restaged_file_commits(tmp_path, env, hook_repo):
    repo = _consumer(tmp_path, env, hook_repo, "finetune-doctor-fix")
    cfg = repo / "qwen_dpo.yaml"
    cfg.write_text(BAD_CONFIG)
    _run(["git", "add", "-A"], repo, env)
    res = _run(["git", "commit", "-m", "add dpo config"], repo, env, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "files were modified by this hook" in out
    fixed = cfg.read_text()
    assert fixed == BAD_CONFIG.replace("dpo_beta: 0.1  # from an old tutorial", "pref_beta: 0.1  # from an old tutorial")
    _run(["git", "add", "-A"], repo, env)
    res = _run(["git", "commit", "-m", "add dpo config"], repo, env, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def _readme_snippet() -> str:
    """The first ```yaml block after the README's pre-commit heading, as a user copies it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### As a pre-commit hook"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    return section[start:section.index("```", start)]


def test_readme_snippet_works_from_a_fresh_clone(tmp_path, env, hook_repo):
    """The README's block, verbatim but for the URL (a fresh `git clone` of the project, which has no tag),
    then `pre-commit autoupdate` and `pre-commit install` as the README says: the bad config is blocked."""
    clone = tmp_path / "finetune-doctor"
    _run(["git", "clone", "-q", str(hook_repo[0]), str(clone)], tmp_path, env)
    assert _run(["git", "tag"], clone, env).stdout.strip() == ""   # the case the old `rev: v0.1.0` failed on
    snippet = _readme_snippet()
    assert "https://github.com/<you>/finetune-doctor" in snippet
    repo = tmp_path / "configs"
    repo.mkdir()
    (repo / ".pre-commit-config.yaml").write_text(
        snippet.replace("https://github.com/<you>/finetune-doctor", str(clone)))
    _run(["git", "init", "-q"], repo, env)
    _run([sys.executable, "-m", "pre_commit", "autoupdate"], repo, env)
    pinned = (repo / ".pre-commit-config.yaml").read_text()
    assert f"rev: {hook_repo[1]}" in pinned, pinned   # no tag: the clone's HEAD commit, pinned by SHA
    _run([sys.executable, "-m", "pre_commit", "install"], repo, env)
    _run(["git", "add", ".pre-commit-config.yaml"], repo, env)
    _run(["git", "commit", "-q", "-m", "pre-commit config"], repo, env)
    (repo / "qwen_dpo.yaml").write_text(BAD_CONFIG)
    _run(["git", "add", "-A"], repo, env)
    res = _run(["git", "commit", "-m", "add dpo config"], repo, env, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "FD002" in out and "dpo_beta" in out, out
