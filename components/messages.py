"""How tpu-vllm words what it tells an operator, so every message reads alike.

- An error or a warning is one line of sentences: ``KEY = VALUE: what is wrong. Fix: what to do.``
- Scripts prefix their lines with their name, then ``error:`` or ``warning:``; progress lines are
  short fragments without a period.
- Values are shown as written (strings quoted, the rest as JSON: ``null``, never ``None``); an
  absent key "is not set"; a near miss gets a did-you-mean.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any

_ENDINGS = (".", "?", "!")


def sentence(text: str) -> str:
    """``text`` on one line, ending with a period unless it already ends a sentence."""
    line = " ".join(text.split())
    return line if not line or line.endswith(_ENDINGS) else f"{line}."


def show(value: Any) -> str:
    """A value as the operator wrote it: strings quoted, the rest as JSON (None is ``null``)."""
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(str(value))


def closest(value: Any, choices: Iterable[str]) -> str | None:
    """The choice ``value`` most likely misspells (``flex_start`` -> ``flex-start``), if any."""
    if not isinstance(value, str) or not value:
        return None
    options = list(choices)
    lowered = {c.lower().replace("_", "-"): c for c in options}
    normalised = value.strip().lower().replace("_", "-")
    if normalised in lowered:
        return lowered[normalised]
    found = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    return found[0] if found else None


def operator_line(prog: str, message: str) -> str:
    """A script's stderr line: ``prog: message``; errors and warnings made sentences."""
    if message.startswith(("error: ", "warning: ")):
        message = sentence(message)
    return f"{prog}: {message}"
