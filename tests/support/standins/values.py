"""Property values across the provider protocol, as plain Python, keeping what is secret.

The engine sends inputs as protobuf Structs (pulumi.provider.experimental's `PropertyValue`):
numbers are floats, a secret is a wrapper, and a value not known yet (a preview) is the string
`pulumi.runtime.rpc.UNKNOWN`. The stand-ins work on plain dicts; which top-level keys were secret
travels beside them, so an output made from a secret input stays secret, as the engine and the
bridged providers keep it (pulumi-terraform-bridge marks Sensitive attributes secret too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pulumi.provider.experimental.property_value import (
    Computed,
    PropertyValue,
    ResourceReference,
)
from pulumi.runtime.rpc import UNKNOWN

__all__ = [
    "UNKNOWN",
    "Plain",
    "from_plain",
    "integral",
    "is_unknown",
    "marshal",
    "to_plain",
    "unmarshal",
]

Plain = dict[str, Any]


def to_plain(value: PropertyValue) -> Any:
    """A PropertyValue as JSON-like Python; unknowns become `UNKNOWN`, secrets are unwrapped."""
    inner = value.value
    if isinstance(inner, Computed):
        return UNKNOWN
    if isinstance(inner, ResourceReference):
        return to_plain(inner.resource_id) if inner.resource_id is not None else inner.urn
    if isinstance(inner, Mapping):
        return {key: to_plain(item) for key, item in inner.items()}
    if isinstance(inner, Sequence) and not isinstance(inner, str):
        return [to_plain(item) for item in inner]
    return inner


def from_plain(value: Any, *, secret: bool = False) -> PropertyValue:
    """Plain Python back to a PropertyValue (ints as floats, as the protocol carries them)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        out = PropertyValue(value)
    elif isinstance(value, int | float):
        out = PropertyValue(float(value))
    elif isinstance(value, Mapping):
        out = PropertyValue({str(k): from_plain(v) for k, v in value.items()})
    elif isinstance(value, Sequence):
        out = PropertyValue([from_plain(item) for item in value])
    else:
        raise TypeError(f"cannot send {type(value).__name__} to the engine")
    return out.with_secret(True) if secret else out


def unmarshal(props: Mapping[str, PropertyValue]) -> tuple[Plain, set[str]]:
    """(plain values, the top-level keys whose value is or contains a secret)."""
    return (
        {key: to_plain(value) for key, value in props.items()},
        {key for key, value in props.items() if value.contains_secret()},
    )


def marshal(values: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, PropertyValue]:
    secrets = set(secret_keys)
    return {key: from_plain(value, secret=key in secrets) for key, value in values.items()}


def is_unknown(value: Any) -> bool:
    """Whether a value (or anything inside it) is not known yet (a preview)."""
    if value == UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(is_unknown(item) for item in value.values())
    if isinstance(value, list):
        return any(is_unknown(item) for item in value)
    return False


def integral(value: Any) -> Any:
    """4.0 -> 4: numbers arrive as floats; the APIs and the Terraform schema want integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
