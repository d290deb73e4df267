"""gcp stand-in: service accounts (`serviceaccount.Account`, `serviceaccount.IAMMember`) and
project IAM (`projects.IAMMember`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/resourcemanager/
resource_google_service_account.go` and `iam_service_account.go`, as pulumi-gcp 10.2.0 bridges
them (`provider/resources.go`: `account_id` autonamed, at most 30 characters):
- Account: ForceNew `account_id` (`ValidateRFC1035Name(6, 30)`) and `project`; `display_name`,
  `description` (at most 256 characters) and `disabled` (default false) update in place;
  the IAM API names it `projects/{project}/serviceAccounts/{email}` (that is its id and `name`),
  `email` `{account_id}@{project}.iam.gserviceaccount.com`, `member` `serviceAccount:{email}`,
  `unique_id` a 21-digit number; a second create of one account id is a 409;
- IAMMember: `service_account_id` ForceNew and matching `verify.ServiceAccountLinkRegex`; the
  policy's resource id is that name.

Project IAM imitates `google_project_iam_member`: `google-beta/services/resourcemanager/
iam_project.go` (`IamProjectSchema`: `project` Required, ForceNew, not taken from the provider,
`CompareProjectName` treating `projects/p` and `p` as one; the policy's resource id is `project`
as given) on `google-beta/tpgiamresource/resource_iam_member.go` (`role`, `member`, `condition`
ForceNew; the id `{project}/{role}/{member}`, gcp_common.IamMember).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from tests.support.standins.gcp_common import IamMember, not_found
from tests.support.standins.kinds import ApiError, Context, Kind, fixed, last_segment
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import UNKNOWN, Plain

_ACCOUNT_ID = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
_SERVICE_ACCOUNT_LINK = re.compile(r"projects/[^/]+/serviceAccounts/[^/]+@[^/]+")


class Account(Kind):
    token = "gcp:serviceaccount/account:Account"
    replace_on = frozenset(["accountId", "project"])
    computed = frozenset(["project", "deletionPolicy"])
    from_provider = fixed(project="project")
    defaults = fixed(disabled=False)
    autoname = ("accountId", 30)

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = []
        account_id = inputs.get("accountId")
        if isinstance(account_id, str) and account_id != UNKNOWN:
            if not 6 <= len(account_id) <= 30:
                failures.append(
                    Failure(
                        "accountId",
                        f'"account_id" ("{account_id}") must be between 6 and 30 characters long',
                    )
                )
            if not re.match(_ACCOUNT_ID, account_id):
                failures.append(
                    Failure(
                        "accountId",
                        f'"account_id" ("{account_id}") must match regex "{_ACCOUNT_ID}"',
                    )
                )
        description = inputs.get("description")
        if isinstance(description, str) and len(description) > 256:
            failures.append(
                Failure(
                    "description",
                    "expected length of description to be in the range (0 - 256), got "
                    f"{description}",
                )
            )
        return failures

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
        name = f"projects/{project}/serviceAccounts/{email}"
        account = {
            "name": name,
            "email": email,
            "uniqueId": str(10**20 + secrets.randbelow(9 * 10**20)),
            "displayName": inputs.get("displayName") or "",
            "description": inputs.get("description") or "",
            "disabled": bool(inputs.get("disabled")),
        }
        if not Store("iam_service_accounts").insert(name, account):
            if inputs.get("createIgnoreAlreadyExists"):
                account = Store("iam_service_accounts").get(name) or account
            else:
                raise ApiError(
                    "Error creating service account: googleapi: Error 409: Service account "
                    f"{inputs['accountId']} already exists within project projects/{project}., "
                    "alreadyExists"
                )
        outputs = {
            **inputs,
            "project": project,
            "name": name,
            "email": email,
            "member": f"serviceAccount:{email}",
            "uniqueId": account["uniqueId"],
        }
        return name, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        account = Store("iam_service_accounts").get(resource_id)
        if account is None:
            return None
        return {**state, **{k: account[k] for k in ("displayName", "description", "disabled")}}

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store("iam_service_accounts")
        account = store.get(resource_id)
        if account is None:
            raise not_found(f"Service account {resource_id}")
        for key in ("displayName", "description", "disabled"):
            account[key] = news.get(key) if news.get(key) is not None else account[key]
        store.put(resource_id, account)
        return {**olds, **news, "project": olds["project"]}

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionPolicy") != "ABANDON":
            Store("iam_service_accounts").delete(resource_id)


class ServiceAccountIamMember(IamMember):
    token = "gcp:serviceaccount/iAMMember:IAMMember"
    parent = "serviceAccountId"

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = super().validate(inputs, ctx)
        value = inputs.get("serviceAccountId")
        if isinstance(value, str) and value != UNKNOWN and not _SERVICE_ACCOUNT_LINK.search(value):
            failures.append(
                Failure(
                    "serviceAccountId",
                    f'"service_account_id" ("{value}") doesn\'t match regexp '
                    f'"{_SERVICE_ACCOUNT_LINK.pattern}"',
                )
            )
        return failures

    def resource_id(self, ctx: Context, inputs: Plain) -> str:
        return str(inputs["serviceAccountId"])

    def require_parent(self, ctx: Context, resource_id: str) -> None:
        if Store("iam_service_accounts").get(resource_id) is None:
            raise not_found(f"Service account {resource_id}")


class ProjectIamMember(IamMember):
    token = "gcp:projects/iAMMember:IAMMember"
    parent = "project"

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "project":
            return last_segment(old) == last_segment(new)
        return super().same(prop, old, new)

    def resource_id(self, ctx: Context, inputs: Plain) -> str:
        return str(inputs["project"])
