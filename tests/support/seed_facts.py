"""Seed 000's facts the tests check, kept in the repository (tests/support/fixtures/seed_facts/).

A clone of the project has no `../shared/seeds/`, so the suite reads the flags and figures from
`seed_000.json`, where each fact is a verbatim quote of the seed plus the value taken from it.
`tests/mocked/test_seed_facts.py` compares the quotes with the seed text itself wherever it exists
(`../shared/seeds/` beside the checkout, or the directory in `TPU_VLLM_SEEDS_DIR`).
"""

from __future__ import annotations

import json
import os
import shlex
from functools import cache
from pathlib import Path
from typing import Any

FACTS_FILE = Path(__file__).resolve().parent / "fixtures" / "seed_facts" / "seed_000.json"
ROOT = Path(__file__).resolve().parents[2]


@cache
def facts() -> dict[str, Any]:
    return dict(json.loads(FACTS_FILE.read_text()))


def seed_file() -> Path | None:
    """The seed's own text, if this checkout has it; None on a plain clone."""
    name = Path(facts()["source"]).name
    dirs = [os.environ.get("TPU_VLLM_SEEDS_DIR", ""), str(ROOT.parent / "shared" / "seeds")]
    for directory in filter(None, dirs):
        path = Path(directory) / name
        if path.is_file():
            return path
    return None


def figure(name: str) -> Any:
    return facts()["figures"][name]["value"]


def serve_flags() -> list[str]:
    """The `vllm serve` flags of seed 000 §1.3, split as a shell would split them."""
    words = shlex.split(facts()["serve_command"]["quote"].replace("\\ ", " "))
    assert words[:3] == ["vllm", "serve", "google/gemma-4-E2B-it"]
    return words[3:]
