"""Under TPU_VLLM_REQUIRE_ENGINE=1 (.ci/run) no engine test may skip (tests/conftest.py).

The hook is driven as pluggy drives a hookwrapper: it gets the report pytest made, and turns
the skip of a test marked `engine` into a failure that quotes the skip's reason; any other
skip, and every skip without the variable, stays a skip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests import conftest


@dataclass
class Report:
    outcome: str = "skipped"
    longrepr: Any = ("tests/x.py", 1, "Skipped: the engine is not built")

    @property
    def skipped(self) -> bool:
        return self.outcome == "skipped"


@dataclass
class Item:
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


@dataclass
class Outcome:
    report: Report

    def get_result(self) -> Report:
        return self.report


def after_hook(item: Item, report: Report) -> Report:
    hook: Any = conftest.pytest_runtest_makereport
    wrapper = hook(item, None)
    next(wrapper)
    with pytest.raises(StopIteration):
        wrapper.send(Outcome(report))
    return report


def test_an_engine_test_that_skips_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_VLLM_REQUIRE_ENGINE", "1")
    report = after_hook(Item({"engine"}), Report())
    assert report.outcome == "failed"
    assert "TPU_VLLM_REQUIRE_ENGINE=1" in report.longrepr
    assert "the engine is not built" in report.longrepr


def test_other_skips_and_runs_without_the_variable_stay_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TPU_VLLM_REQUIRE_ENGINE", "1")
    assert after_hook(Item(), Report()).outcome == "skipped"
    monkeypatch.delenv("TPU_VLLM_REQUIRE_ENGINE")
    assert after_hook(Item({"engine"}), Report()).outcome == "skipped"


def test_a_kube_test_that_skips_fails_in_ci_under_its_own_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TPU_VLLM_REQUIRE_ENGINE", raising=False)
    monkeypatch.setenv("TPU_VLLM_REQUIRE_KUBE", "1")
    report = after_hook(Item({"kube"}), Report())
    assert report.outcome == "failed"
    assert "kube test skipped under TPU_VLLM_REQUIRE_KUBE=1" in report.longrepr
    # An engine test is not held by the kube variable.
    assert after_hook(Item({"engine"}), Report()).outcome == "skipped"
    monkeypatch.delenv("TPU_VLLM_REQUIRE_KUBE")
    assert after_hook(Item({"kube"}), Report()).outcome == "skipped"
