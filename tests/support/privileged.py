"""Tests that need privileges (root, a new PID namespace): skipped on a user's run, failed in CI.

A developer running the suite as themselves cannot give the fake container root's files or
create a PID namespace, and a skip with its reason is right there. In CI a skip would hide that
the check never ran: `.ci/run` exports REQUIRE_ENV=1, and then the same condition is a failure.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

#: Exported by .ci/run before the test command.
REQUIRE_ENV = "TPU_VLLM_REQUIRE_PRIVILEGED_TESTS"


def required() -> bool:
    """True when this run must not skip a privileged test (CI)."""
    return os.environ.get(REQUIRE_ENV, "") == "1"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip, saying why and how to require it; or fail, when REQUIRE_ENV says it must run."""
    if required():
        pytest.fail(
            f"{reason}, but {REQUIRE_ENV}=1 (set by .ci/run) requires this test to run. Fix: run "
            "CI as root where `unshare --pid --fork` is allowed (e.g. a privileged container)",
            pytrace=False,
        )
    pytest.skip(f"{reason} (with {REQUIRE_ENV}=1, as in .ci/run, this is a failure)")
