"""The node's SSH host key, read through the TPU API, as a dynamic resource of its own.

The guest agent publishes the VM's host keys as guest attributes under `hostkeys/`; read through
the authenticated API, they give a key to pin that did not come over the network being verified.
A resource of its own: a failure here must not lose track of a TPU that bills.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components.engine_values import without_provider
from components.vm import org_policy
from components.vm.tpu_api import ApiError, TpuApi, poll_delays, report

QUERY_PATH = "hostkeys/"
PREFERRED_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa")


def pick_host_key(answer: Mapping[str, Any]) -> str | None:
    """`ssh-ed25519 AAAA...` from a getGuestAttributes answer, or None while there is none."""
    found: dict[str, str] = {}
    for attribute in answer.get("guestAttributes") or []:
        for item in (attribute.get("queryValue") or {}).get("items") or []:
            if item.get("namespace") == "hostkeys" and item.get("key") and item.get("value"):
                found[str(item["key"])] = str(item["value"]).strip()
    for key_type in PREFERRED_KEY_TYPES:
        if key_type in found:
            return f"{key_type} {found[key_type].split()[-1]}"
    return None


def _guest_attribute_policies(project: str) -> list[org_policy.PolicyReading]:
    readings = []
    for constraint in org_policy.GUEST_ATTRIBUTE_CONSTRAINTS:
        try:
            readings.append(org_policy.read_policy(project, constraint))
        except Exception as error:  # noqa: BLE001 - only an explanation is at stake here
            readings.append(org_policy.PolicyReading(constraint, None, str(error)))
    return readings


def _no_host_key_reason(node: str, timeout: float, refused: ApiError | None) -> str:
    """Why there is no host key, naming an enforced org policy: then retrying cannot help."""
    project = node.split("/")[1] if node.startswith("projects/") else node
    policies = _guest_attribute_policies(project)
    for policy in policies:
        if policy.enforced:
            return f"{node} has no readable SSH host key: " + org_policy.guest_attributes_error(
                project, policy.constraint
            )
    what = (
        f"reading its guest attributes was refused ({refused})"
        if refused
        else f"guest attributes `{QUERY_PATH}` stayed empty for {timeout:.0f} s"
    )
    unknown = "".join(
        f" Whether the organization policy {p.constraint} blocks them could not be read "
        f"({p.reason})."
        for p in policies
        if p.enforced is None
    )
    names = " / ".join(org_policy.GUEST_ATTRIBUTE_CONSTRAINTS)
    return (
        f"{node} published no SSH host key ({what}), so the node cannot be verified and no "
        f"secret is sent to it.{unknown} Fix: check that the image runs the guest agent and "
        f"that {names} is not enforced on the project, then retry `pulumi up`; or accept the "
        f"risk with `pulumi config set --path '{org_policy.UNVERIFIED_KEY}' true`."
    )


class NodeHostKeyProvider(dyn.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        node = str(props["node_name"])
        outs = without_provider(props)
        if props.get("allow_unverified"):
            # No `enable-guest-attributes` then: polling would only bill TPU time to the bound.
            report(
                f"{node}: SSH host key not read: {org_policy.UNVERIFIED_KEY} is true, so the "
                "node's metadata does not enable guest attributes, and every remote command "
                "connects WITHOUT host-key verification."
            )
            return dyn.CreateResult(id_=f"{node}/hostkey", outs={**outs, "host_key": None})
        timeout = float(props.get("timeout_seconds") or 600)
        poll = float(props.get("poll_seconds") or 10)
        api = TpuApi(
            retry_attempts=int(props.get("retry_attempts") or 6),
            retry_base_seconds=float(props.get("retry_base_seconds") or 2.0),
        )
        start = time.monotonic()
        host_key = None
        refused: ApiError | None = None
        delays = poll_delays(poll)
        while True:
            try:
                host_key = pick_host_key(api.get_guest_attributes(node, QUERY_PATH))
            except ApiError as error:
                if error.http_status not in (400, 403, 404):
                    raise
                if error.http_status != 404:  # refused, not "not listed yet": stop asking
                    refused = error
                    break
            if host_key or time.monotonic() - start >= timeout:
                break
            time.sleep(next(delays))
        if not host_key:
            raise Exception(_no_host_key_reason(node, timeout, refused))
        elapsed = time.monotonic() - start
        report(f"{node}: SSH host key {host_key.split()[0]} read after {elapsed:.0f} s")
        return dyn.CreateResult(id_=f"{node}/hostkey", outs={**outs, "host_key": host_key})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        # A new node (same name, new request: create_time differs) has a new host key.
        keys = ("node_name", "node_create_time", "allow_unverified")
        replaces = [k for k in keys if olds.get(k) != news.get(k)]
        return dyn.DiffResult(changes=bool(replaces), replaces=replaces)


@dataclass(frozen=True, kw_only=True)
class NodeHostKeyArgs:
    """The node whose published host key is awaited, and how long to wait."""

    node_name: pulumi.Input[str]
    node_create_time: pulumi.Input[str | None]
    allow_unverified: bool
    timeout_seconds: float = 600
    poll_seconds: float = 10


class NodeHostKey(dyn.Resource):
    """`host_key` is `ssh-ed25519 AAAA...`, or None when unverified connections are allowed."""

    host_key: pulumi.Output[str | None]

    def __init__(
        self, name: str, args: NodeHostKeyArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(
            NodeHostKeyProvider(),
            name,
            {
                "node_name": args.node_name,
                "node_create_time": args.node_create_time,
                "allow_unverified": args.allow_unverified,
                "timeout_seconds": args.timeout_seconds,
                "poll_seconds": args.poll_seconds,
                "host_key": None,
            },
            opts,
        )
