"""Values as a dynamic provider receives them from the engine.

Props cross the engine as protobuf Structs, whose numbers are doubles: `4` arrives as `4.0`.
Both backends' dynamic providers compare props by value (the VM's queued resource) or hand
them to an API that refuses a float where it wants an int32 (the GKE pods' dry run).
"""

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
