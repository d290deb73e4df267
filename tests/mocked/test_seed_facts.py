"""The seed facts kept in the repository are verbatim quotes of the seed, where it exists."""

from __future__ import annotations

import pytest

from tests.support import seed_facts


def _seed_text() -> str:
    path = seed_facts.seed_file()
    if path is None:
        pytest.skip("seed 000 is not beside this checkout (../shared/seeds/); nothing to compare")
    return path.read_text()


def test_serve_command_is_quoted_verbatim_from_seed_000() -> None:
    assert seed_facts.facts()["serve_command"]["quote"] in _seed_text()


@pytest.mark.parametrize("name", sorted(seed_facts.facts()["figures"]))
def test_figure_is_quoted_verbatim_and_its_value_is_in_the_quote(name: str) -> None:
    fact = seed_facts.facts()["figures"][name]
    value = fact["value"]
    # The value is read from the quote itself ("3.8%" -> 0.038), so a typo in either shows.
    shown = f"{value * 100:g}%" if name.endswith("premium_over_spot") else f"{value}"
    assert shown in fact["quote"], (name, value)
    assert fact["quote"] in _seed_text(), name


def test_flags_parse_from_the_kept_quote() -> None:
    flags = seed_facts.serve_flags()
    assert flags[:2] == ["--dtype", "bfloat16"]
    assert flags[-2:] == ["--reasoning-parser", "gemma4"]
