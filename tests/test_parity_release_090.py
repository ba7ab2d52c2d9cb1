"""Launch parity against LLaMA-Factory 0.9.0 (the wheel .ci/run installs into .lf-releases/0.9.0): the tests and
bars of tests/test_parity_releases.py, run on 0.9.0's verdicts. A file of its own so that pytest-xdist's
``--dist loadfile`` builds this corpus on one worker while main's is built on the other."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_parity_releases import (  # noqa: F401 (the tests and marks run here on 0.9.0's verdicts)
    pytestmark, release_outcomes, test_no_error_on_a_config_the_release_accepts, test_recall_of_the_release_rejections)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return release_outcomes("0.9.0", tmp_path_factory)
