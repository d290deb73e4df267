"""The output contract's values: what each backend hands `__main__.py`, and the empty values.

The engine drops an output whose value is None, so every always-present output passes one of the
helpers below and "not applicable" is a documented empty value (docs/outputs.md, "No output is
ever null"). Both backends fill every field of `BackendOutputs`; only the optional outputs may be
None. Components keep None inside where it means "not known yet".
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
    endpoint: pulumi.Output[str]
    endpoint_ip: pulumi.Output[str]
    openai_base_url: pulumi.Output[str]

    def as_outputs(self) -> dict[str, pulumi.Output[str]]:
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
    """`http://HOST:PORT` for the address and, with `dns.*`, the name; known only once `after`
    (the readiness check) is, so consumers never see an endpoint that does not serve yet."""

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
    """The per-backend part of the stack outputs (the rest comes from the config). Each field's
    meaning and empty value: docs/outputs.md, "The contract"."""

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
    renew_command: pulumi.Input[str]
    ssh_command: pulumi.Input[str]
    ssh_private_key: pulumi.Input[str]
    ssh_host_key: pulumi.Input[str | None]
    hbm: pulumi.Input[dict[str, float] | None]
    #: Optional: None (the output is absent) when no readiness result was recorded.
    startup_seconds: pulumi.Input[float | None]
    #: Optional, as startup_seconds.
    first_answer_seconds: pulumi.Input[float | None]
    replicas: pulumi.Input[int]
    cluster: pulumi.Input[str]
    cache_restored: pulumi.Input[dict[str, Any]]
    dashboard_url: pulumi.Input[str] = ""
    logs_command: pulumi.Input[str] = ""
    logs_url: pulumi.Input[str] = ""
    uptime_check: pulumi.Input[str] = ""
