"""Values as a dynamic provider receives them from the engine: props cross it as protobuf
Structs, whose numbers are doubles (`4` arrives as `4.0`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def whole_numbers(value: Any) -> Any:
    """`value` with every integral number as an int, recursively; the rest as it is."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return int(value) if float(value).is_integer() else float(value)
    if isinstance(value, Mapping):
        return {str(k): whole_numbers(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [whole_numbers(v) for v in value]
    return value


def without_provider(props: Mapping[str, Any]) -> dict[str, Any]:
    """`props` less the `__provider` pickle the engine adds: what a provider returns as outputs."""
    return {k: v for k, v in props.items() if k != "__provider"}
