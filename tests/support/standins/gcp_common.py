"""What several gcp stand-in types share: project numbers, labels, times, and IAM members.

Sources, besides each type's own (named in its module):
- labels: pulumi-gcp adds its attribution label `goog-pulumi-provisioned: "true"` to
  `effectiveLabels` and `pulumiLabels` (both secret outputs), never to `labels`
  (pulumi/pulumi-gcp `provider/provider_yaml_test.go`, TestEmptyLabels;
  `add_terraform_attribution_label` renamed `addPulumiAttributionLabel`, `provider/resources.go`);
- IAM members: hashicorp/terraform-provider-google-beta `google-beta/tpgiamresource/
  resource_iam_member.go`: `role`, `member` and `condition` ForceNew, `member` validated by
  `validateIAMMember`, the id `<resource id>/<role>/<member>`, an `etag` from the policy.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import re
from typing import Any, ClassVar

from tests.support.standins.kinds import ApiError, Context, Kind
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import UNKNOWN, Plain

ATTRIBUTION_LABEL = {"goog-pulumi-provisioned": "true"}
_MEMBER = re.compile(
    r"(.+:.+|projectOwners|projectReaders|projectWriters|allUsers|allAuthenticatedUsers)"
)


def project_number(project: str) -> str:
    """A fake but stable project number: the same rule as tests/support/fakes/secret_manager.py, so
    names agree whether or not that fake is the Secret Manager in use."""
    if project.isdigit():
        return project
    digest = hashlib.sha256(project.encode()).hexdigest()
    return str(100_000_000_000 + int(digest[:10], 16) % 10**11)


def now() -> str:
    """RFC 3339 with nanoseconds, as the Google APIs answer `createTime`."""
    stamp = datetime.datetime.now(datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond:06d}000Z"


def etag() -> str:
    """An IAM policy etag: base64 of 8 bytes (`BwXhqDmA4Cg=`), new on every change."""
    return base64.b64encode(os.urandom(8)).decode()


def label_outputs(inputs: Plain, key: str = "labels") -> Plain:
    """`effectiveLabels` / `pulumiLabels` for the given labels input."""
    labels = dict(inputs.get(key) or {})
    return {
        "effectiveLabels": {**labels, **ATTRIBUTION_LABEL},
        "pulumiLabels": {**labels, **ATTRIBUTION_LABEL},
    }


class IamMember(Kind):
    """A `*IAMMember`: one member in one role of one resource's policy, kept in the store's
    `iam_policies` (resource id -> {etag, bindings: {role: [members]}})."""

    #: The input naming the resource (`secretId`, `bucket`, `serviceAccountId`).
    parent: ClassVar[str]
    replace_on = frozenset(["role", "member", "condition"])

    def resource_id(self, ctx: Context, inputs: Plain) -> str:
        raise NotImplementedError

    def require_parent(self, ctx: Context, resource_id: str) -> None:
        """404 as the API answers `setIamPolicy` on a resource that does not exist."""

    def replaces(self, prop: str, old: Any, new: Any) -> bool:
        return prop in self.replace_on or prop == self.parent

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        member = inputs.get("member")
        if not isinstance(member, str) or member == UNKNOWN:
            return []
        if member.startswith("deleted"):
            return [
                Failure(
                    "member",
                    "invalid value for member (Terraform does not support IAM members for "
                    "deleted principals)",
                )
            ]
        if not _MEMBER.search(member):
            return [
                Failure(
                    "member",
                    f'invalid value "{member}" for member (IAM members must have one of the values '
                    "outlined here: https://cloud.google.com/billing/docs/reference/rest/v1/"
                    "Policy#Binding)",
                )
            ]
        return []

    def _member_id(self, resource_id: str, inputs: Plain) -> str:
        """`<resource id>/<role>/<member>`, and with a condition `/<title>/<description>/
        <expression>` (`conditionKey.String`, `google-beta/tpgiamresource/iam.go`)."""
        member_id = f"{resource_id}/{inputs['role']}/{inputs['member']}"
        condition = inputs.get("condition") or {}
        if not condition.get("title"):
            return member_id
        key = [condition.get(k) or "" for k in ("title", "description", "expression")]
        return f"{member_id}/{'/'.join(key)}"

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        resource_id = self.resource_id(ctx, inputs)
        self.require_parent(ctx, resource_id)
        store = Store("iam_policies")
        policy = store.get(resource_id) or {"bindings": {}}
        members = policy["bindings"].setdefault(inputs["role"], [])
        if inputs["member"] not in members:
            members.append(inputs["member"])
        policy["etag"] = etag()
        store.put(resource_id, policy)
        outputs = {**inputs, self.parent: resource_id, "etag": policy["etag"]}
        return self._member_id(resource_id, inputs), outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        policy = Store("iam_policies").get(str(state.get(self.parent)))
        if not policy or state.get("member") not in policy["bindings"].get(state.get("role"), []):
            return None
        return {**state, "etag": policy["etag"]}

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        store = Store("iam_policies")
        key = str(state.get(self.parent))
        policy = store.get(key)
        if not policy:
            return
        members = policy["bindings"].get(state.get("role"), [])
        if state.get("member") in members:
            members.remove(state.get("member"))
        policy["bindings"] = {role: m for role, m in policy["bindings"].items() if m}
        if policy["bindings"]:
            policy["etag"] = etag()
            store.put(key, policy)
        else:
            store.delete(key)


def read_stored(store: str, resource_id: str, state: Plain) -> Plain | None:
    """A stored object's read: the state with what the cloud holds now over it; None when it
    is gone (Terraform's Read clears the id on a 404, and the engine drops the resource)."""
    found: Plain | None = Store(store).get(resource_id)
    return {**state, **found} if found else None


def insert_new(store: Store, path: str, outputs: Plain) -> None:
    """Store a created object, refused with the API's 409 when the name is taken."""
    if not store.insert(path, outputs):
        raise ApiError(f"googleapi: Error 409: The resource '{path}' already exists, alreadyExists")


def not_found(what: str) -> ApiError:
    return ApiError(f"googleapi: Error 404: {what} not found, notFound")
