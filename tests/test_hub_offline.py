"""The JSON-config download without a network (issue 21): one short attempt (<= 2 s in all, no retries),
huggingface_hub's own logging silenced, then one line saying so. No test reaches the internet: the endpoint is
a name that cannot resolve (RFC 2606 ``.invalid``) or a local socket that accepts and never answers."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from finetune_doctor.readers.model import hub
from finetune_doctor.readers.model.errors import ModelUnresolved
from finetune_doctor.readers.model.modelcfg import load_arch

REPO = "acme/not-in-the-catalog-7b"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    for var in ("HF_HUB_OFFLINE", "USE_MODELSCOPE_HUB", "FINETUNE_DOCTOR_NO_CACHE", "HF_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


def test_unresolvable_endpoint_is_one_line_and_fast(monkeypatch, capfd, caplog):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.invalid")
    pytest.importorskip("huggingface_hub")
    t0 = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(ModelUnresolved) as ei:
        load_arch(REPO, allow_download=True)
    took = time.monotonic() - t0
    assert took < 2.5
    assert "no network: acme/not-in-the-catalog-7b config.json not downloaded" in ei.value.message
    assert "hub.example.invalid:443" in ei.value.message
    out, err = capfd.readouterr()
    assert "Retrying" not in out + err and "Retrying" not in caplog.text
    assert "\n" not in ei.value.message


def test_blackholed_endpoint_stops_at_the_deadline(monkeypatch, capfd, caplog):
    """The connect succeeds (the kernel accepts into the backlog) but nothing ever answers: huggingface_hub would
    wait and retry with 1-8 s sleeps; the doctor gives up at its deadline and says why, in one line. The deadline
    is `load_arch`'s `timeout_s`, 0.4 s here: the path is the same at any deadline, and the default's 2 s (pinned
    by test_the_default_attempt_is_two_seconds) was this file's whole wall time."""
    pytest.importorskip("huggingface_hub")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{srv.getsockname()[1]}")
        # an online attempt is what this test times: a shell that exports HF_HUB_OFFLINE=1 would stop it earlier
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        import huggingface_hub.constants as hf_constants   # read once at its import: the module's copy too

        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False, raising=False)
        t0 = time.monotonic()
        with caplog.at_level(logging.DEBUG), pytest.raises(ModelUnresolved) as ei:
            load_arch(REPO, allow_download=True, timeout_s=0.4)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert took <= 1.0, took
    assert "timed out after 0." in ei.value.message and "\n" not in ei.value.message
    # the worker the deadline left behind keeps retrying: its "Retrying in 1s" warnings must stay unprinted
    assert logging.getLogger("huggingface_hub.utils._http").getEffectiveLevel() >= logging.ERROR
    out, err = capfd.readouterr()
    assert "Retrying" not in out + err and "Retrying" not in caplog.text


def test_the_default_attempt_is_two_seconds():
    assert hub.DEFAULT_TIMEOUT_S <= 2.0


def test_endpoint_address_follows_hf_endpoint(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub.endpoint_address() == ("huggingface.co", 443)
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.local:8080/")
    assert hub.endpoint_address() == ("mirror.local", 8080)
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.com")
    assert hub.endpoint_address() == ("hf-mirror.com", 443)
