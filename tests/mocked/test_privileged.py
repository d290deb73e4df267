"""The privileged tests' skip-or-fail decision (tests/support/privileged.py)."""

from __future__ import annotations

import pytest

from tests.support.privileged import REQUIRE_ENV, skip_or_fail


def test_a_users_run_skips_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="not root") as skipped:
        skip_or_fail("not root")
    assert REQUIRE_ENV in str(skipped.value)


@pytest.mark.parametrize("value", ["", "0", "yes"])
def test_only_1_requires_the_privileged_tests(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.skip.Exception):
        skip_or_fail("not root")


def test_ci_fails_instead_of_skipping(monkeypatch: pytest.MonkeyPatch) -> None:
    """.ci/run exports the variable: a privileged test that cannot run there is a failure."""
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="not root") as failed:
        skip_or_fail("not root")
    assert ".ci/run" in str(failed.value) and "Fix:" in str(failed.value)


def test_ci_exports_the_variable_before_the_tests() -> None:
    from tests.support.pulumi_program import ROOT

    script = (ROOT / ".ci" / "run").read_text()
    export = script.index(f"export {REQUIRE_ENV}=1")
    assert export < script.index('VENV="$VENV" scripts/test.sh')  # the test command
