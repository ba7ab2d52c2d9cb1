"""readers/dists.py, the one home of "which version is installed here": the dist-info scan gives the version
importlib.metadata gives, for every distribution of this environment, and the three callers use it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distributions, version

from finetune_doctor.readers import dists
from finetune_doctor.readers.config import lfrelease, stack
from finetune_doctor.readers.deepspeed import dsschema


def test_every_installed_distribution_reads_as_importlib_metadata_reads_it():
    names = sorted({d.metadata["Name"] for d in distributions() if d.metadata["Name"]})
    assert len(names) > 10
    for name in names:
        try:
            want = version(name)
        except PackageNotFoundError:
            want = None
        assert dists.installed_version(name) == want, name
    assert dists.installed_version("no-such-distribution-xyz") is None


def test_callers_share_the_answer(monkeypatch):
    monkeypatch.setattr(dists, "installed_version", lambda d: {"llamafactory": "0.9.3", "torch": "2.6.0",
                                                               "deepspeed": "0.16.4"}.get(d))
    assert lfrelease.installed_version() == "0.9.3"
    assert dsschema.installed_version("deepspeed") == "0.16.4"
    assert stack.installed_versions(("torch", "peft", "llamafactory")) == {"torch": "2.6.0", "llamafactory": "0.9.3"}
