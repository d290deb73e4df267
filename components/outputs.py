"""The output contract's empty values: an exported value is never None.

The Pulumi engine drops a stack output whose value is None (pulumi/runtime/rpc.py
`serialize_properties` skips properties that serialize to None), so `pulumi stack output NAME`
and `StackReference.require_output(NAME)` would fail on it. Every always-present output goes
through one of these at the export boundary, so "not applicable" is a documented empty value
(README "Outputs") instead of a missing name. Components keep None internally where it means
"not known yet" (a connection host before the node exists).
"""

from __future__ import annotations

from typing import Any

import pulumi


def text_or_empty(value: pulumi.Input[str | None]) -> pulumi.Output[str]:
    """A string output that is "" when the value does not apply (no IP, no expiry, no key)."""
    return pulumi.Output.from_input(value).apply(lambda v: v or "")


def object_or_empty(value: pulumi.Input[dict[str, Any] | None]) -> pulumi.Output[dict[str, Any]]:
    """An object output that is {} when the value is not known (vLLM logged no such line)."""
    return pulumi.Output.from_input(value).apply(lambda v: dict(v or {}))
