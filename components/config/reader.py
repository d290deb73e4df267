"""Reading one section's raw values: the error type, the per-key reader, the converters.
Every problem is recorded, not raised, so one `ConfigError` names them all."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import pulumi

from components.config.keys import KEYS, NAMESPACE
from components.messages import closest, sentence, show

_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class ConfigError(pulumi.RunError):
    """Bad stack configuration. A RunError, so Pulumi prints the message without a traceback."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = [sentence(p) for p in problems]
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"tpu-vllm: the stack configuration has {len(self.problems)} problem(s); "
            f"nothing was created:\n{lines}"
        )


T = TypeVar("T")


class Reader:
    """Reads one section's keys, recording each problem instead of stopping at the first."""

    def __init__(self, section: str, raw: Any, problems: list[str]) -> None:
        self.section = section
        self.problems = problems
        self.values: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        if raw is not None and not isinstance(raw, Mapping):
            self.fail("", raw, f"not an object. Fix: set its keys, e.g. `{self.key('KEY')}`")
        for key in self.values:
            if key not in KEYS[section]:
                close = closest(key, KEYS[section])
                hint = f"Fix: did you mean `{close}`?" if close else "Fix: remove it."
                self.fail(
                    key,
                    self.values[key],
                    f"unknown key. {hint} Known keys: {', '.join(KEYS[section])}",
                )

    def key(self, name: str) -> str:
        return f"{NAMESPACE}:{self.section}.{name}" if name else f"{NAMESPACE}:{self.section}"

    def fail(self, name: str, value: Any, fix: str) -> None:
        """Record `KEY = VALUE: what is wrong. Fix: ...`; an absent value "is not set"."""
        shown = "is not set" if value is None else f"= {show(value)}"
        self.problems.append(f"{self.key(name)} {shown}: {fix}")

    def fail_choice(
        self, name: str, value: Any, what: str, choices: Sequence[str], note: str = ""
    ) -> None:
        """An unknown enum value: a did-you-mean for a near miss, and the valid values."""
        listing = " | ".join(choices)
        match = closest(value, choices)
        fix = (
            f"Fix: did you mean `{match}`? Valid: {listing}" if match else f"Fix: one of {listing}"
        )
        self.fail(name, value, f"unknown {what}{f' ({note})' if note else ''}. {fix}")

    def get(self, name: str, convert: Callable[[Any], T], default: T, what: str) -> T:
        """Convert a present value, or return the default; a bad value is recorded."""
        value = self.values.get(name)
        if value is None:
            return default
        try:
            return convert(value)
        except (TypeError, ValueError):
            self.fail(
                name,
                value,
                f"expected {what}. Fix: `pulumi config set --path '{self.key(name)}' ...`",
            )
            return default


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (int, str)):
        return int(value)
    raise TypeError(value)


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    return float(value)


def as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise TypeError(value)


def as_str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(value)
    return value.strip()


def as_args(value: Any) -> tuple[str, ...]:
    """A list of arguments, or one string split as a shell would (`--a --b 2`)."""
    if isinstance(value, str):
        return tuple(shlex.split(value))
    return as_str_list(value)


def as_str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(value)
    if not all(isinstance(v, str) for v in value):
        raise TypeError(value)
    return tuple(cast(Sequence[str], value))


def parse_duration(text: str) -> int:
    """`4h`, `90m`, `2d`, `1h30m`, `14400s` -> seconds. Raises ValueError otherwise."""
    match = _DURATION_RE.match(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        raise ValueError(text)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_positive_duration(r: Reader, name: str, default: str) -> int:
    raw = r.values.get(name, default)
    try:
        seconds = parse_duration(raw)
        if seconds <= 0:
            raise ValueError(raw)
    except ValueError:
        r.fail(name, raw, "not a duration. Fix: write it like 30m, 1h or 1h30m")
        return 0
    return seconds
