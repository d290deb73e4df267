"""The output contract's values: what each backend hands `__main__.py`, and the empty values.

The Pulumi engine drops a stack output whose value is None (pulumi/runtime/rpc.py
`serialize_properties` skips properties that serialize to None), so `pulumi stack output NAME`
and `StackReference.require_output(NAME)` would fail on it. Every always-present output goes
through one of the helpers below at the export boundary, so "not applicable" is a documented
empty value (docs/outputs.md) instead of a missing name. Components keep None internally where
it means "not known yet" (a connection host before the node exists).

Both backends fill every field of `BackendOutputs`, so `__main__.py` exports one contract
whichever backend ran (tests/mocked/test_output_contract.py). A field that means nothing for a
backend gets its documented empty value; only the optional outputs (`startup_seconds`,
`first_answer_seconds`) may be None, and are then absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi


def text_or_empty(value: pulumi.Input[str | None]) -> pulumi.Output[str]:
    """A string output that is "" when the value does not apply (no IP, no expiry, no key)."""
    return pulumi.Output.from_input(value).apply(lambda v: v or "")


@dataclass(frozen=True)
class EndpointUrls:
    """`endpoint`, `endpoint_ip` and `openai_base_url`, as both backends make them."""

    endpoint: pulumi.Output[str]
    endpoint_ip: pulumi.Output[str]
    openai_base_url: pulumi.Output[str]

    def as_outputs(self) -> dict[str, pulumi.Output[str]]:
        """For a component's `register_outputs`."""
        return {
            "endpoint": self.endpoint,
            "endpoint_ip": self.endpoint_ip,
            "openai_base_url": self.openai_base_url,
        }


def endpoint_urls(
    address: pulumi.Input[str | None],
    hostname: pulumi.Input[str] | None,
    port: int,
    after: pulumi.Input[Any],
) -> EndpointUrls:
    """`http://HOST:PORT` for the address and, with `dns.*`, the name; each known only once
    `after` (the readiness check) is, so consumers never see an endpoint that does not serve
    yet. "" without an address: the output contract's empty value, never None."""

    def url_of(host: pulumi.Input[str | None]) -> pulumi.Output[str]:
        return pulumi.Output.all(host, after).apply(
            lambda parts: f"http://{parts[0]}:{port}" if parts[0] else ""
        )

    endpoint_ip = url_of(address)
    endpoint = endpoint_ip if hostname is None else url_of(hostname)
    openai_base_url = endpoint.apply(lambda url: f"{url}/v1" if url else "")
    return EndpointUrls(endpoint, endpoint_ip, openai_base_url)


def object_or_empty(value: pulumi.Input[dict[str, Any] | None]) -> pulumi.Output[dict[str, Any]]:
    """An object output that is {} when the value is not known (vLLM logged no such line)."""
    return pulumi.Output.from_input(value).apply(lambda v: dict(v or {}))


@dataclass
class BackendOutputs:
    """The per-backend part of the stack outputs (the rest comes from the config)."""

    endpoint: pulumi.Input[str]
    endpoint_ip: pulumi.Input[str]
    openai_base_url: pulumi.Input[str]
    api_key: pulumi.Input[str]
    api_key_secret: pulumi.Input[str]
    zone: pulumi.Input[str]
    queued_resource: pulumi.Input[str]
    node: pulumi.Input[str]
    external_ip: pulumi.Input[str | None]
    internal_ip: pulumi.Input[str | None]
    expires_at: pulumi.Input[str | None]
    #: The command that renews an ended run; "" on GKE, which replaces expired nodes itself.
    renew_command: pulumi.Input[str]
    ssh_command: pulumi.Input[str]
    ssh_private_key: pulumi.Input[str]
    ssh_host_key: pulumi.Input[str | None]
    hbm: pulumi.Input[dict[str, float] | None]
    #: Optional: None (the output is absent) when no readiness result was recorded.
    startup_seconds: pulumi.Input[float | None]
    #: Optional, as startup_seconds: from `Application startup complete.` to the model's first
    #: good answer to the readiness check (scripts/remote/wait_ready.py).
    first_answer_seconds: pulumi.Input[float | None]
    #: Serving replicas: 1 on the VM backend, `gke.replicas` on GKE.
    replicas: pulumi.Input[int]
    #: The GKE cluster's `projects/P/locations/L/clusters/N`; "" on the VM backend.
    cluster: pulumi.Input[str]
    #: Whether the start was warm (components/compile_cache.py `cache_result`), never None.
    cache_restored: pulumi.Input[dict[str, Any]]
    #: The stack's Cloud Monitoring dashboard; "" with `monitoring.enabled` false.
    dashboard_url: pulumi.Input[str] = ""
    #: `gcloud logging read ...` of the server's log, and its Logs Explorer link; "" when the
    #: log does not leave the node (VM backend, `monitoring.enabled` false).
    logs_command: pulumi.Input[str] = ""
    logs_url: pulumi.Input[str] = ""
    #: `projects/P/uptimeCheckConfigs/ID`; "" without `monitoring.uptimeCheck`.
    uptime_check: pulumi.Input[str] = ""
