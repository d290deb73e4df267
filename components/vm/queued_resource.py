"""The flex-start queued resource, as a Pulumi dynamic provider over the TPU v2alpha1 API.

No Pulumi provider can ask for flex-start: pulumi-gcp 10.2's `V2QueuedResource` lacks the
provisioning model, the run duration and the node's metadata. This one sends the v2alpha1 body
itself, waits for ACTIVE, fails over between zones, replaces an expired TPU on refresh, and
renews one near its end create-first. Its module path is pickled into every state, so it holds
no clients and no config. Why and how: docs/tpu-request.md, "Provider code and state";
docs/renewal.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi.dynamic as dyn

from components import renewal
from components.engine_values import whole_numbers, without_provider
from components.naming import resource_id, stack_labels
from components.vm.queued_resource_create import try_zone
from components.vm.queued_resource_delete import delete_and_wait, drain_if_succeeded
from components.vm.queued_resource_spec import (
    DEAD_STATES,
    IN_PLACE_CONFIG,
    IN_PLACE_KEYS,
    OUTPUT_KEYS,
    PROVISIONING_MODELS,
    SPEC_KEYS,
    Spec,
    Timing,
    describe,
    node_ids,
)
from components.vm.tpu_api import ApiError, TpuApi, report

if TYPE_CHECKING:  # the provider host imports this module: it takes no config package along
    from components.config import RenewalSettings, TpuSettings


class QueuedResourceProvider(dyn.ResourceProvider):
    """create / read / diff / update / delete for one flex-start queued resource."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = []
        optional = ("labels", "tags", "network", "metadata", "max_run_seconds")
        for key in (*SPEC_KEYS, "zones"):
            if key not in news and key not in optional:
                failures.append(dyn.CheckFailure(key, f"{key} is required"))
        if news.get("provisioning") not in PROVISIONING_MODELS:
            failures.append(dyn.CheckFailure("provisioning", "flex-start, spot or on-demand"))
        elif news["provisioning"] == "flex-start" and not news.get("max_run_seconds"):
            failures.append(dyn.CheckFailure("max_run_seconds", "flex-start needs a run limit"))
        if not news.get("zones"):
            failures.append(dyn.CheckFailure("zones", "at least one zone is required"))
        return dyn.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = Spec.from_props(props)
        api = _api(spec.timing)
        zone_errors: list[str] = []
        for zone in spec.zones:
            outs = try_zone(api, spec, zone, zone_errors)
            if outs is not None:
                outs["zone_errors"] = zone_errors
                return dyn.CreateResult(id_=outs["qr_name"], outs={**_inputs(props), **outs})
        raise Exception(
            f"no zone could provide {spec.accelerator_type} ({spec.provisioning}); every "
            "queued resource that was requested has been deleted again:\n  "
            + "\n  ".join(zone_errors)
            + "\nFix: add zones to tpu-vllm:tpu.zones, raise tpu-vllm:tpu.capacityWait, or "
            "check TPU quota for this provisioning model."
        )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        spec = Spec.from_props(props).for_name(id_)
        api = _api(spec.timing)
        try:
            qr = api.get_queued_resource(id_)
        except ApiError as error:
            if error.http_status == 404:
                report(f"{id_} is gone (404): it will be requested again on the next up")
                return dyn.ReadResult(id_="", outs={})
            raise
        zone = id_.split("/locations/", 1)[1].split("/", 1)[0]
        outs = describe(api, spec, zone, qr)
        if outs["state"] in ("SUSPENDED", "SUSPENDING"):
            report(
                f"{id_} is {outs['state']}: its flex-start run ended and the node was deleted; "
                "`pulumi up` replaces it"
            )
        elif renewal.in_window(outs["state"], outs["termination_time"], spec.lead_seconds):
            text = _window_text(outs["termination_time"], spec.lead_seconds, spec.drain_seconds)
            report(f"{id_}: {text}")
        return dyn.ReadResult(id_=id_, outs={**_inputs(props), **outs})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        """A spec change or a dead TPU: replaced delete-first. A new image, or the renewal
        window with nothing else changed: replaced create-first, so this one serves meanwhile.
        Zones, timing, lead or drain: updated in place, since `delete` sees only stored values;
        inside the window that update goes first and the renewal waits for the next `up`.
        docs/tpu-request.md, "Progress, retries and what changes in place"."""
        name = olds.get("qr_name") or id_
        replaces = [
            k for k in SPEC_KEYS if whole_numbers(olds.get(k)) != whole_numbers(news.get(k))
        ]
        new_zones = [str(z) for z in news.get("zones") or ()]
        old_zone = olds.get("zone")
        if old_zone and old_zone not in new_zones:
            replaces.append("zones")  # its zone was dropped from the list
        if olds.get("state") in DEAD_STATES:
            replaces.append("state")
        if replaces:
            return dyn.DiffResult(changes=True, replaces=replaces, delete_before_replace=True)
        served, image = olds.get("image"), news.get("image")
        if image and served != image:
            # Before the in-place keys: storing them first would restart the new build on this
            # node. So zones, drain or timing changed with it are not used for this node's
            # delete (docs/operations.md, "Upgrade the image").
            report(
                f"{name}: the image changes ({served or 'a tag, unpinned'} -> {image}): a "
                "successor node starts with it while this one serves; the name moves once the "
                "successor has answered, then this node is drained and deleted"
            )
            return dyn.DiffResult(changes=True, replaces=["image"], delete_before_replace=False)
        stored = [
            k for k in IN_PLACE_KEYS if whole_numbers(olds.get(k)) != whole_numbers(news.get(k))
        ]
        lead = news.get("renewal_lead_seconds")
        termination = olds.get("termination_time")
        window = renewal.in_window(olds.get("state"), termination, lead)
        if stored and (not window or stored != ["renewal_lead_seconds"]):
            keys = ", ".join(IN_PLACE_CONFIG[k] for k in stored)
            later = (
                "; it is inside its renewal window, so the renewal follows at the next "
                "`pulumi up`, which then drains and looks for the successor with these values"
                if window
                else ""
            )
            report(
                f"{name}: {keys} changed since it was created: stored in place (an update with "
                f"no TPU call), so its delete uses the new values{later}"
            )
            return dyn.DiffResult(changes=True, replaces=[], delete_before_replace=False)
        if window:
            drain = news.get("drain_seconds")
            text = _window_text(
                termination, lead, renewal.DEFAULT_DRAIN_SECONDS if drain is None else drain
            )
            report(f"{name}: {text}")
            return dyn.DiffResult(
                changes=True, replaces=["termination_time"], delete_before_replace=False
            )
        return dyn.DiffResult(changes=False, replaces=[], delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        """Store the new `IN_PLACE_KEYS`; no TPU call, the node did not change."""
        outs = {k: olds.get(k) for k in OUTPUT_KEYS}
        changed = [
            IN_PLACE_CONFIG[k]
            for k in IN_PLACE_KEYS
            if whole_numbers(olds.get(k)) != whole_numbers(news.get(k))
        ]
        report(f"{olds.get('qr_name') or id_}: stored {', '.join(changed) or 'its settings'}")
        return dyn.UpdateResult(outs={**_inputs(news), **outs})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        spec = Spec.from_props(props).for_name(id_)
        api = _api(spec.timing)
        drain_if_succeeded(api, spec, id_)
        delete_and_wait(api, id_, spec.timing)


def _api(timing: Timing) -> TpuApi:
    return TpuApi(
        retry_attempts=timing.retry_attempts, retry_base_seconds=timing.retry_base_seconds
    )


def _inputs(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in without_provider(props).items() if k not in OUTPUT_KEYS}


def _window_text(termination_time: str | None, lead: Any, drain: Any) -> str:
    """The progress line of read/diff inside the renewal window."""
    left = renewal.seconds_left(termination_time) or 0.0
    return (
        f"ACTIVE with {renewal.minutes(left)} of its run left, inside the renewal window "
        f"(renewal.lead {renewal.minutes(float(lead or 0))}): `pulumi up` requests the next "
        "TPU beside it (create before delete), moves the server and the DNS name to it once it "
        f"serves, then deletes this one after a drain of {renewal.minutes(float(drain or 0))}"
    )


@dataclass(frozen=True, kw_only=True)
class QueuedResourceArgs:
    """One node's request; `props()` is what the provider receives (the `Spec` fields)."""

    project: str
    stack: str
    tpu: TpuSettings
    #: `access.network`, the VPC the node joins.
    network: str
    renewal: RenewalSettings
    #: The pinned image the node will serve: a new one replaces the node create-first (`diff`).
    image: pulumi.Input[str] | None
    metadata: Mapping[str, pulumi.Input[str]]
    service_account_email: pulumi.Input[str]
    network_tag: str
    timing: Mapping[str, float] = field(default_factory=dict)

    def props(self) -> dict[str, Any]:
        tpu = self.tpu
        return {
            "project": self.project,
            "zones": list(tpu.zones),
            "qr_id": resource_id(self.stack),
            "node_id": node_ids(self.stack)[0],
            "accelerator_type": tpu.chip.accelerator_type,
            "runtime_version": tpu.runtime_version,
            "provisioning": tpu.provisioning,
            "max_run_seconds": tpu.max_run_seconds,
            "capacity_wait_seconds": tpu.capacity_wait_seconds,
            "service_account_email": self.service_account_email,
            "labels": stack_labels(self.stack),
            "tags": [self.network_tag],
            "network": self.network,
            "metadata": dict(self.metadata),
            "timing": dict(self.timing),
            # Read at each diff (the renewal window) and at the delete of a replaced node (the
            # drain); like `timing`, a change to them never replaces the TPU.
            "renewal_lead_seconds": self.renewal.lead_seconds,
            "drain_seconds": self.renewal.drain_seconds,
            "image": self.image,
        }


class QueuedResource(dyn.Resource):
    """One queued resource with one node. Inputs are the `Spec` fields plus `zones`/`timing`."""

    qr_name: pulumi.Output[str]
    node_name: pulumi.Output[str]
    zone: pulumi.Output[str]
    state: pulumi.Output[str]
    external_ip: pulumi.Output[str | None]
    internal_ip: pulumi.Output[str | None]
    create_time: pulumi.Output[str | None]
    termination_time: pulumi.Output[str | None]
    zone_errors: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        args: QueuedResourceArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            QueuedResourceProvider(),
            name,
            {**args.props(), **dict.fromkeys(OUTPUT_KEYS)},
            opts,
        )
