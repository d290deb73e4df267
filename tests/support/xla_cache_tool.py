"""The compile cache's node tool, scripts/remote/xla_cache.py: where it is, for the tests that
run it as the node does (a process of its own), and loaded as a module for those that call it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

TOOL = Path(__file__).resolve().parents[2] / "scripts" / "remote" / "xla_cache.py"


def load_tool() -> Any:
    """scripts/remote/xla_cache.py as a module (it is a file the node runs, not a package),
    with its parts (xla_cache_*.py beside it) loaded afresh: a new process on the node, with
    no store, token or fallback left from another run."""
    for name in [n for n in sys.modules if n.startswith("xla_cache_")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location("xla_cache_tool", TOOL)
    assert spec and spec.loader
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool
