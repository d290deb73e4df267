"""Organization policies that make a TPU node unusable, checked before any TPU is requested.

OS Login forced on (`compute.requireOsLogin`, `compute.managed.requireOsLogin`) leaves the node
with no user from `ssh-keys`; guest attributes blocked (`compute.disableGuestAttributesAccess`,
`compute.managed.disableGuestAttributesAccess`) leaves its host key unreadable. The gate's
provider checks them in `check`, which the engine runs at every preview and up, before any
create. What and why: docs/secrets-and-access.md, "Organization policies"; how each is read:
docs/tpu-request.md, "What the stack creates".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import google_auth_httplib2
import httplib2
import pulumi
import pulumi.dynamic as dyn
from googleapiclient import discovery
from googleapiclient.errors import HttpError

from components.engine_values import without_provider
from components.vm.google_credentials import google_credentials
from components.vm.tpu_api import report

#: For Private Service Connect and for tests.
ENDPOINT_ENV = "RESOURCE_MANAGER_API_ENDPOINT"
#: Unset, v2 follows ENDPOINT_ENV, so rerouted reads never leave for the public endpoint
#: unnoticed; an endpoint without v2 answers 404, a warning.
ORG_POLICY_ENDPOINT_ENV = "ORG_POLICY_API_ENDPOINT"
HTTP_TIMEOUT_SECONDS = 60
NUM_RETRIES = 3
REQUIRE_OS_LOGIN = "compute.requireOsLogin"
DISABLE_GUEST_ATTRIBUTES = "compute.disableGuestAttributesAccess"
MANAGED_REQUIRE_OS_LOGIN = "compute.managed.requireOsLogin"
MANAGED_DISABLE_GUEST_ATTRIBUTES = "compute.managed.disableGuestAttributesAccess"
OS_LOGIN_CONSTRAINTS = (REQUIRE_OS_LOGIN, MANAGED_REQUIRE_OS_LOGIN)
GUEST_ATTRIBUTE_CONSTRAINTS = (DISABLE_GUEST_ATTRIBUTES, MANAGED_DISABLE_GUEST_ATTRIBUTES)
PERMISSION = "orgpolicy.policy.get"
VIEWER_ROLE = "roles/orgpolicy.policyViewer"
ORG_POLICY_API = "orgpolicy.googleapis.com"
UNVERIFIED_KEY = "tpu-vllm:access.allowUnverifiedHostKey"
#: The metadata key each managed constraint evaluates (Compute Engine, "Managed constraints").
MANAGED_METADATA_KEY = {
    MANAGED_REQUIRE_OS_LOGIN: "enable-oslogin",
    MANAGED_DISABLE_GUEST_ATTRIBUTES: "enable-guest-attributes",
}
#: "Cannot be read by this deployer", not "broken": no permission or API off, a constraint
#: the organization lacks, or one v2 does not know.
UNREADABLE_STATUSES = (400, 403, 404)


@dataclass(frozen=True)
class PolicyReading:
    """A boolean constraint's effective state; `enforced` is None when it could not be read."""

    constraint: str
    enforced: bool | None
    reason: str = ""


def is_managed(constraint: str) -> bool:
    return constraint.startswith("compute.managed.")


def _http() -> google_auth_httplib2.AuthorizedHttp:
    return google_auth_httplib2.AuthorizedHttp(
        google_credentials(), http=httplib2.Http(timeout=HTTP_TIMEOUT_SECONDS)
    )


def _service(api: str = "cloudresourcemanager", version: str = "v1") -> Any:
    endpoint = os.environ.get(ENDPOINT_ENV)
    if api == "orgpolicy":
        endpoint = os.environ.get(ORG_POLICY_ENDPOINT_ENV) or endpoint
    return discovery.build(
        api,
        version,
        http=_http(),
        static_discovery=True,
        cache_discovery=False,
        client_options={"api_endpoint": endpoint} if endpoint else None,
    )


def _error_text(error: HttpError) -> str:
    try:
        body = json.loads(error.content.decode("utf-8"))["error"]
        return f"{body.get('status') or error.resp.status}: {body.get('message') or ''}".strip()
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"HTTP {error.resp.status}"


def read_policy(project: str, constraint: str) -> PolicyReading:
    if is_managed(constraint):
        return read_managed_policy(project, constraint)
    return read_boolean_policy(project, constraint)


def read_boolean_policy(project: str, constraint: str) -> PolicyReading:
    """Cloud Resource Manager v1 `projects.getEffectiveOrgPolicy`; a 403 means "unknown"."""
    request = (
        _service()
        .projects()
        .getEffectiveOrgPolicy(
            resource=f"projects/{project}", body={"constraint": f"constraints/{constraint}"}
        )
    )
    try:
        policy = request.execute(num_retries=NUM_RETRIES)
    except HttpError as error:
        if int(error.resp.status) == 403:
            return PolicyReading(constraint, None, _error_text(error))
        raise Exception(
            f"reading the organization policy {constraint} of project {project} failed: "
            f"{_error_text(error)}. Fix: check that gcp:project is right and that the Cloud "
            "Resource Manager API (cloudresourcemanager.googleapis.com) is enabled."
        ) from None
    # Unset or restored to default: no booleanPolicy.enforced, and both default to off.
    return PolicyReading(constraint, bool((policy.get("booleanPolicy") or {}).get("enforced")))


def read_managed_policy(project: str, constraint: str) -> PolicyReading:
    """Org Policy v2 `projects.policies.getEffectivePolicy`."""
    request = (
        _service("orgpolicy", "v2")
        .projects()
        .policies()
        .getEffectivePolicy(name=f"projects/{project}/policies/{constraint}")
    )
    try:
        policy = request.execute(num_retries=NUM_RETRIES)
    except HttpError as error:
        if int(error.resp.status) in UNREADABLE_STATUSES:
            return PolicyReading(constraint, None, _error_text(error))
        raise Exception(
            f"reading the organization policy {constraint} of project {project} failed: "
            f"{_error_text(error)}. Fix: check that gcp:project is right and that the "
            f"Organization Policy API ({ORG_POLICY_API}) is enabled."
        ) from None
    return evaluate_v2_policy(constraint, policy)


def evaluate_v2_policy(constraint: str, policy: Mapping[str, Any]) -> PolicyReading:
    """A `GoogleCloudOrgpolicyV2Policy` (orgpolicy.v2 discovery document) as enforced or not.

    No spec, no rules or `spec.reset` leave the default, off for both managed constraints (not
    among the org-policy docs' "automatically enforced constraints"); `dryRunSpec` is audit
    only. A rule that still carries a condition in the effective policy applies to some
    resources only: whether it covers the node cannot be told.
    """
    spec = policy.get("spec") or {}
    if spec.get("reset"):
        return PolicyReading(constraint, False)
    rules: Sequence[Mapping[str, Any]] = spec.get("rules") or []
    if any(rule.get("enforce") is True and not rule.get("condition") for rule in rules):
        return PolicyReading(constraint, True)
    conditional = [rule for rule in rules if rule.get("enforce") is True and rule.get("condition")]
    if conditional:
        expression = (conditional[0].get("condition") or {}).get("expression") or "a condition"
        return PolicyReading(
            constraint, None, f"enforced only where `{expression}` holds; the node may match"
        )
    return PolicyReading(constraint, False)


def unreadable_warning(project: str, reading: PolicyReading) -> str:
    api = (
        f"the Organization Policy API ({ORG_POLICY_API}) enabled and "
        if is_managed(reading.constraint)
        else ""
    )
    return (
        f"could not read the organization policy {reading.constraint} of project {project} "
        f"({reading.reason}): {reading.constraint} was NOT checked; going on as if it were not "
        f"enforced. To have it checked before a TPU is requested, the deployer needs {api}"
        f"`{PERMISSION}` (e.g. {VIEWER_ROLE})."
    )


def _what_the_policy_does(constraint: str) -> str:
    if constraint == REQUIRE_OS_LOGIN:
        return (
            "Google Cloud rejects requests that set `enable-oslogin` to false in VM or project "
            "metadata"
        )
    if constraint == DISABLE_GUEST_ATTRIBUTES:
        return "guest attributes cannot be read through the API"
    return (
        f"this managed constraint evaluates the node's `{MANAGED_METADATA_KEY[constraint]}` "
        "metadata"
    )


def os_login_error(project: str, constraint: str = REQUIRE_OS_LOGIN) -> str:
    return (
        f"the organization policy constraint {constraint} is enforced on project {project}: "
        f"{_what_the_policy_does(constraint)}, and the node needs `enable-oslogin: FALSE`: with "
        "OS Login on, the guest agent creates no user from the node's `ssh-keys` metadata (the "
        "agent follows only that metadata, never the policy), so no remote command could log "
        "in. Nothing was requested. Fix: ask your organization admin to exempt the project "
        f"from {constraint} (a project-level policy that does not enforce it), or deploy to a "
        "project where it is not enforced."
    )


def guest_attributes_error(project: str, constraint: str = DISABLE_GUEST_ATTRIBUTES) -> str:
    return (
        f"the organization policy constraint {constraint} is enforced on project {project}: "
        f"{_what_the_policy_does(constraint)}, so the node's SSH host key is never available "
        "and the node cannot be verified before secrets are sent to it. Fix: ask your "
        f"organization admin to exempt the project from {constraint}, or accept the risk with "
        f"`pulumi config set --path '{UNVERIFIED_KEY}' true`."
    )


def unverified_warning(project: str, constraint: str) -> str:
    metadata = (
        f" The node's metadata leaves out `{MANAGED_METADATA_KEY[constraint]}`, the key this "
        "managed constraint evaluates, so it does not refuse the request."
        if is_managed(constraint)
        else ""
    )
    return (
        f"the organization policy {constraint} is enforced on project {project}: the node's "
        f"SSH host key cannot be read, and {UNVERIFIED_KEY} is true, so the node will be used "
        f"WITHOUT host-key verification.{metadata}"
    )


def check_node_access(project: str, *, allow_unverified_host_key: bool) -> list[str]:
    """Raise at the first policy that makes the node unusable; else return the warnings."""
    readings: list[PolicyReading] = []
    for constraint in OS_LOGIN_CONSTRAINTS:
        readings.append(read_policy(project, constraint))
        if readings[-1].enforced:
            raise Exception(os_login_error(project, constraint))
    warnings: list[str] = []
    for constraint in GUEST_ATTRIBUTE_CONSTRAINTS:
        readings.append(read_policy(project, constraint))
        if readings[-1].enforced and not allow_unverified_host_key:
            raise Exception(guest_attributes_error(project, constraint))
        if readings[-1].enforced:
            warnings.append(unverified_warning(project, constraint))
    return warnings + [unreadable_warning(project, r) for r in readings if r.enforced is None]


class OrgPolicyGateProvider(dyn.ResourceProvider):
    """Runs the policy check in `check` (every preview and up); create stores nothing else."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        for warning in check_node_access(
            str(news["project"]),
            allow_unverified_host_key=bool(news.get("allow_unverified_host_key")),
        ):
            report(warning)
        return dyn.CheckResult(news, [])

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        outs = without_provider(props)
        return dyn.CreateResult(id_=f"{props['project']}/org-policy-gate", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        keys = ("project", "allow_unverified_host_key")
        return dyn.DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs=without_provider(news))


@dataclass(frozen=True, kw_only=True)
class OrgPolicyGateArgs:
    """The project whose org policies are read, and whether an unverified host key is allowed."""

    project: str
    allow_unverified_host_key: bool


class OrgPolicyGate(dyn.Resource):
    """A resource whose only job is its provider's check: make it a dependency of the TPU."""

    def __init__(
        self, name: str, args: OrgPolicyGateArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(
            OrgPolicyGateProvider(),
            name,
            {"project": args.project, "allow_unverified_host_key": args.allow_unverified_host_key},
            opts,
        )
