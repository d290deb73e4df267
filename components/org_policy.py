"""Organization policies that make a TPU node unusable, checked before any TPU is requested.

Two boolean constraints break this program on a node that has already been paid for:

- `compute.requireOsLogin` turns OS Login on for every VM. The guest agent then creates no
  account from the `ssh-keys` metadata (guest-agent `oslogin.go`, `non_windows_accounts.go`),
  whatever the node's own `enable-oslogin` says, so every remote command fails to log in.
- `compute.disableGuestAttributesAccess` blocks reading guest attributes, so the node's SSH host
  key (published under `hostkeys/`) can never be read and the connection cannot be verified.

The effective policy (merged over organization, folders and project) comes from Cloud Resource
Manager v1 `projects.getEffectiveOrgPolicy`, through google-api-python-client's bundled
discovery document, like the TPU client. It needs `orgpolicy.policy.get` on the project; a
deployer without it gets a warning and the program goes on.

`OrgPolicyGate` runs the check in its provider's `check`, which the Pulumi engine calls for every
registered resource at `pulumi preview` and `pulumi up`, before any create; the queued resource
depends on the gate, so a refused check means no TPU is requested. Under Pulumi mocks no provider
runs, so the program's tests never reach Google; the provider itself is tested against a
loopback fake (`tests/fakes/resource_manager.py`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import google_auth_httplib2
import httplib2
import pulumi
import pulumi.dynamic as dyn
from googleapiclient import discovery
from googleapiclient.errors import HttpError

from components.google_credentials import google_credentials
from components.tpu_api import report

#: Override of the Cloud Resource Manager endpoint, for Private Service Connect and for tests.
ENDPOINT_ENV = "RESOURCE_MANAGER_API_ENDPOINT"
HTTP_TIMEOUT_SECONDS = 60
#: google-api-python-client retries 429 and 5xx answers itself, with exponential backoff.
NUM_RETRIES = 3
REQUIRE_OS_LOGIN = "compute.requireOsLogin"
DISABLE_GUEST_ATTRIBUTES = "compute.disableGuestAttributesAccess"
PERMISSION = "orgpolicy.policy.get"
VIEWER_ROLE = "roles/orgpolicy.policyViewer"
UNVERIFIED_KEY = "tpu-vllm:access.allowUnverifiedHostKey"


@dataclass(frozen=True)
class PolicyReading:
    """A boolean constraint's effective state; `enforced` is None when it could not be read."""

    constraint: str
    enforced: bool | None
    reason: str = ""


def _service() -> Any:
    endpoint = os.environ.get(ENDPOINT_ENV)
    http = google_auth_httplib2.AuthorizedHttp(
        google_credentials(), http=httplib2.Http(timeout=HTTP_TIMEOUT_SECONDS)
    )
    return discovery.build(
        "cloudresourcemanager",
        "v1",
        http=http,
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


def read_boolean_policy(project: str, constraint: str) -> PolicyReading:
    """Whether `constraint` is enforced on `project`, merged over the resource hierarchy.

    A 403 (no `orgpolicy.policy.get`, or the API disabled) is an answer too: "unknown".
    """
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
    # An unset or restored-to-default policy has no booleanPolicy.enforced: both constraints
    # default to "not enforced".
    return PolicyReading(constraint, bool((policy.get("booleanPolicy") or {}).get("enforced")))


def unreadable_warning(project: str, reading: PolicyReading) -> str:
    return (
        f"could not read the organization policy {reading.constraint} of project {project} "
        f"({reading.reason}); going on as if it were not enforced. To have it checked before "
        f"a TPU is requested, grant the deployer `{PERMISSION}` (e.g. {VIEWER_ROLE})."
    )


def os_login_error(project: str) -> str:
    return (
        f"the organization policy constraint {REQUIRE_OS_LOGIN} is enforced on project "
        f"{project}: OS Login is forced on for every VM, so the guest agent creates no user "
        "from the node's `ssh-keys` metadata (its `enable-oslogin: FALSE` cannot override the "
        "policy) and no remote command could log in. Nothing was requested. Fix: ask your "
        f"organization admin to exempt the project from {REQUIRE_OS_LOGIN}, or deploy to a "
        "project where it is not enforced."
    )


def guest_attributes_error(project: str) -> str:
    return (
        f"the organization policy constraint {DISABLE_GUEST_ATTRIBUTES} is enforced on project "
        f"{project}: guest attributes cannot be read, so the node's SSH host key is never "
        "available and the node cannot be verified before secrets are sent to it. Fix: ask "
        f"your organization admin to exempt the project from {DISABLE_GUEST_ATTRIBUTES}, or "
        f"accept the risk with `pulumi config set --path '{UNVERIFIED_KEY}' true`."
    )


def check_node_access(project: str, *, allow_unverified_host_key: bool) -> list[str]:
    """Raise if a policy makes the node unusable; return warnings for what could not be read."""
    warnings: list[str] = []
    os_login = read_boolean_policy(project, REQUIRE_OS_LOGIN)
    if os_login.enforced:
        raise Exception(os_login_error(project))
    if os_login.enforced is None:
        warnings.append(unreadable_warning(project, os_login))
    guest = read_boolean_policy(project, DISABLE_GUEST_ATTRIBUTES)
    if guest.enforced and not allow_unverified_host_key:
        raise Exception(guest_attributes_error(project))
    if guest.enforced:
        warnings.append(
            f"the organization policy {DISABLE_GUEST_ATTRIBUTES} is enforced on project "
            f"{project}: the node's SSH host key cannot be read, and {UNVERIFIED_KEY} is true, "
            "so the node will be used WITHOUT host-key verification."
        )
    if guest.enforced is None:
        warnings.append(unreadable_warning(project, guest))
    return warnings


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
        outs = {k: v for k, v in props.items() if k != "__provider"}
        return dyn.CreateResult(id_=f"{props['project']}/org-policy-gate", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        keys = ("project", "allow_unverified_host_key")
        return dyn.DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs={k: v for k, v in news.items() if k != "__provider"})


class OrgPolicyGate(dyn.Resource):
    """A resource whose only job is its provider's check: make it a dependency of the TPU."""

    def __init__(
        self,
        name: str,
        *,
        project: str,
        allow_unverified_host_key: bool,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            OrgPolicyGateProvider(),
            name,
            {"project": project, "allow_unverified_host_key": allow_unverified_host_key},
            opts,
        )
