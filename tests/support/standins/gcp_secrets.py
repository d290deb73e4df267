"""gcp stand-in: Secret Manager (`secretmanager.Secret`, `SecretVersion`, `SecretIamMember`,
`getSecret`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/secretmanager/`
(`resource_secret_manager_secret.go`, `resource_secret_manager_secret_version.go`,
`iam_secret_manager_secret.go`, `data_source_secret_manager_secret.go`) as pulumi-gcp 10.2.0
bridges it (`provider/secret_manager.go`: `secretId` autonamed, `deleteBeforeReplace`):
- Secret: ForceNew `replication`, `secretId`, `tags`, `project`; id
  `projects/{project}/secrets/{secret_id}`, `name` `projects/{number}/secrets/{secret_id}` (the
  API's answer); `deletionProtection` (default false) refuses a delete;
- SecretVersion: ForceNew `secret`, `secretData` (Sensitive), `isSecretDataBase64`, `project`,
  `secretDataWoVersion`; ExactlyOneOf `secretData`/`secretDataWo`; id and `name`
  `projects/{number}/secrets/{id}/versions/{n}`, `version` its last segment; `enabled` (default
  true) updates in place (`:enable`/`:disable`); delete per `deletionPolicy` (DELETE destroys
  the version, DISABLE disables it, ABANDON leaves it);
- SecretIamMember: `secretId` ForceNew, output as the path `projects/{p}/secrets/{s}`;
- getSecret: `{id} not found` when absent.

Where it goes: with `gcp:secretManagerCustomEndpoint` (or GOOGLE_SECRET_MANAGER_CUSTOM_ENDPOINT,
the provider's own override, base `https://secretmanager.googleapis.com/v1/`) set, to that REST
API with `gcp:accessToken` / GOOGLE_OAUTH_ACCESS_TOKEN as the bearer: in the tests, the loopback
fake tests/support/fakes/secret_manager.py, where the node's own Secret Manager reads (and
scripts/save_hf_token.py's writes) meet what the stack made. Otherwise to the stand-in's store.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tests.support.standins.gcp_common import (
    IamMember,
    label_outputs,
    not_found,
    now,
    project_number,
)
from tests.support.standins.kinds import ApiError, Context, Function, Kind, fixed, last_segment
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import Plain, is_unknown


class RestSecrets:
    """The Secret Manager v1 REST API at a custom endpoint."""

    def __init__(self, base: str, token: str) -> None:
        self.base = base if base.endswith("/") else f"{base}/"
        if not token:
            raise ApiError(
                "Attempted to load application default credentials since neither `credentials`"
                " nor `access_token` was set in the provider block. No credentials loaded."
            )
        self.token = token

    def call(self, method: str, path: str, body: Plain | None = None) -> Plain | None:
        """The answer's JSON; None on 404."""
        request = urllib.request.Request(  # noqa: S310 - the configured endpoint
            self.base + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                result: Plain = json.loads(answer.read() or b"{}")
                return result
        except urllib.error.HTTPError as error:
            if error.code == 404 and method == "GET":
                return None
            detail = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError, KeyError, TypeError):
                detail = json.loads(detail)["error"]["message"]
            raise ApiError(f"googleapi: Error {error.code}: {detail}") from None

    def create_secret(self, project: str, secret_id: str, body: Plain) -> Plain:
        query = urllib.parse.urlencode({"secretId": secret_id})
        return self.call("POST", f"projects/{project}/secrets?{query}", body) or {}

    def get_secret(self, project: str, secret_id: str) -> Plain | None:
        return self.call("GET", f"projects/{project}/secrets/{secret_id}")

    def delete_secret(self, project: str, secret_id: str) -> None:
        self.call("DELETE", f"projects/{project}/secrets/{secret_id}")

    def add_version(self, project: str, secret_id: str, data: bytes) -> Plain:
        body = {"payload": {"data": base64.b64encode(data).decode()}}
        return self.call("POST", f"projects/{project}/secrets/{secret_id}:addVersion", body) or {}

    def get_version(self, name: str) -> Plain | None:
        return self.call("GET", name)

    def set_version_state(self, name: str, verb: str) -> Plain:
        return self.call("POST", f"{name}:{verb}", {}) or {}


class LocalSecrets:
    """Secret Manager as the store holds it; payloads are kept only as a SHA-256."""

    def __init__(self) -> None:
        self.secrets = Store("secretmanager_secrets")
        self.versions = Store("secretmanager_versions")

    def create_secret(self, project: str, secret_id: str, body: Plain) -> Plain:
        name = f"projects/{project_number(project)}/secrets/{secret_id}"
        secret = {**body, "name": name, "createTime": now()}
        if not self.secrets.insert(name, secret):
            raise ApiError(f"googleapi: Error 409: Secret [{name}] already exists., alreadyExists")
        return secret

    def get_secret(self, project: str, secret_id: str) -> Plain | None:
        found: Plain | None = self.secrets.get(
            f"projects/{project_number(project)}/secrets/{secret_id}"
        )
        return found

    def delete_secret(self, project: str, secret_id: str) -> None:
        name = f"projects/{project_number(project)}/secrets/{secret_id}"
        self.secrets.delete(name)
        for version in self.versions.all():
            if version.startswith(f"{name}/"):
                self.versions.delete(version)

    def add_version(self, project: str, secret_id: str, data: bytes) -> Plain:
        secret = self.get_secret(project, secret_id)
        if secret is None:
            raise not_found(f"Secret [projects/{project}/secrets/{secret_id}]")
        taken = [k for k in self.versions.all() if k.startswith(f"{secret['name']}/versions/")]
        version = {
            "name": f"{secret['name']}/versions/{len(taken) + 1}",
            "state": "ENABLED",
            "createTime": now(),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        self.versions.put(version["name"], version)
        return version

    def get_version(self, name: str) -> Plain | None:
        found: Plain | None = self.versions.get(_numbered(name))
        return found

    def set_version_state(self, name: str, verb: str) -> Plain:
        version = self.get_version(name)
        if version is None:
            raise not_found(f"Secret Version [{name}]")
        version["state"] = {"enable": "ENABLED", "disable": "DISABLED", "destroy": "DESTROYED"}[
            verb
        ]
        if verb == "destroy":
            version["destroyTime"] = now()
        self.versions.put(version["name"], version)
        return version


def _numbered(name: str) -> str:
    parts = name.split("/")
    parts[1] = project_number(parts[1])
    return "/".join(parts)


def api(ctx: Context) -> RestSecrets | LocalSecrets:
    endpoint = ctx.config.get("secretManagerCustomEndpoint")
    if endpoint:
        return RestSecrets(endpoint, ctx.config.get("accessToken", ""))
    return LocalSecrets()


def secret_path(ctx: Context, value: str, inputs: Plain) -> tuple[str, str]:
    """(project, secret id) from `projects/P/secrets/S` or a bare id (then the project input)."""
    parts = value.split("/")
    if len(parts) >= 4 and parts[0] == "projects" and parts[2] == "secrets":
        return parts[1], parts[3]
    return ctx.project(inputs), value


class Secret(Kind):
    token = "gcp:secretmanager/secret:Secret"
    replace_on = frozenset(["replication", "secretId", "tags", "project"])
    computed = frozenset(["project", "expireTime", "deletionPolicy"])
    from_provider = fixed(project="project")
    defaults = fixed(deletionProtection=False)
    autoname = ("secretId", 255)
    delete_before_replace = True

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        replication = inputs.get("replication")
        if isinstance(replication, dict) and not is_unknown(replication):
            chosen = [k for k in ("auto", "userManaged") if replication.get(k) is not None]
            if len(chosen) != 1:
                return [
                    Failure(
                        "replication",
                        '"replication.0.auto": only one of `replication.0.auto,'
                        "replication.0.user_managed` can be specified, but "
                        f"{len(chosen)} were specified.",
                    )
                ]
        return []

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        labels = label_outputs(inputs)
        replication = inputs["replication"]
        body: Plain = {"labels": labels["effectiveLabels"]}
        if replication.get("auto") is not None:
            body["replication"] = {"automatic": {}}
        else:
            replicas = replication["userManaged"].get("replicas") or []
            body["replication"] = {
                "userManaged": {"replicas": [{"location": r["location"]} for r in replicas]}
            }
        answer = api(ctx).create_secret(project, inputs["secretId"], body)
        outputs = {
            **inputs,
            **labels,
            "project": project,
            "name": answer["name"],
            "createTime": answer.get("createTime", now()),
            "effectiveAnnotations": dict(inputs.get("annotations") or {}),
        }
        return f"projects/{project}/secrets/{inputs['secretId']}", outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return state if api(ctx).get_secret(state["project"], state["secretId"]) else None

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        # Labels, annotations, ttl, ... are PATCHed in place; the fake has no PATCH, so only
        # the state changes here (what the API would answer back).
        return {**olds, **news, **label_outputs(news), "project": olds["project"]}

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionProtection"):
            raise ApiError(
                "cannot destroy secret without setting deletion_protection=false and running "
                "`pulumi up`"
            )
        if state.get("deletionPolicy") == "ABANDON":
            return
        api(ctx).delete_secret(state["project"], state["secretId"])


class SecretVersion(Kind):
    token = "gcp:secretmanager/secretVersion:SecretVersion"
    replace_on = frozenset(
        ["secret", "secretData", "isSecretDataBase64", "project", "secretDataWoVersion"]
    )
    computed = frozenset(["project", "deletionPolicy"])
    defaults = fixed(enabled=True)
    sensitive = frozenset(["secretData"])

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "secret":  # DiffSuppressFunc: tpgresource.CompareSelfLinkOrResourceName
            return last_segment(old) == last_segment(new)
        return super().same(prop, old, new)

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        given = [k for k in ("secretData", "secretDataWo") if inputs.get(k) is not None]
        if len(given) != 1:
            return [
                Failure(
                    "secretData",
                    f'"secret_data": one of `secret_data,secret_data_wo` must be specified, '
                    f"{len(given)} were",
                )
            ]
        return []

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project, secret_id = secret_path(ctx, inputs["secret"], inputs)
        text = inputs.get("secretData") or inputs.get("secretDataWo") or ""
        data = base64.b64decode(text) if inputs.get("isSecretDataBase64") else text.encode()
        secrets = api(ctx)
        answer = secrets.add_version(project, secret_id, data)
        name = answer["name"]
        if inputs.get("enabled") is False:
            answer = secrets.set_version_state(name, "disable")
        outputs = {
            **inputs,
            "project": project,
            "name": name,
            "version": last_segment(name),
            "createTime": answer.get("createTime", now()),
            "destroyTime": "",
        }
        if "secretDataWo" in outputs:
            outputs["secretDataWo"] = None  # write-only: never kept
        return name, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        found = api(ctx).get_version(resource_id)
        if found is None:
            return None
        return {
            **state,
            "enabled": found.get("state") == "ENABLED",
            "destroyTime": found.get("destroyTime", ""),
        }

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        if bool(news.get("enabled", True)) != bool(olds.get("enabled", True)):
            api(ctx).set_version_state(
                resource_id, "enable" if news.get("enabled", True) else "disable"
            )
        return {**olds, **news, "project": olds["project"]}

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        policy = state.get("deletionPolicy") or "DELETE"
        if policy == "ABANDON":
            return
        secrets = api(ctx)
        found = secrets.get_version(resource_id)
        if found is None or found.get("state") == "DESTROYED":
            return
        secrets.set_version_state(resource_id, "destroy" if policy == "DELETE" else "disable")


class SecretIamMember(IamMember):
    token = "gcp:secretmanager/secretIamMember:SecretIamMember"
    parent = "secretId"
    computed = frozenset(["project"])

    def resource_id(self, ctx: Context, inputs: Plain) -> str:
        project, secret_id = secret_path(ctx, inputs["secretId"], inputs)
        return f"projects/{project}/secrets/{secret_id}"

    def require_parent(self, ctx: Context, resource_id: str) -> None:
        _, project, _, secret_id = resource_id.split("/")
        if api(ctx).get_secret(project, secret_id) is None:
            raise not_found(f"Secret [{resource_id}]")

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "secretId":  # DiffSuppressFunc: tpgresource.CompareSelfLinkOrResourceName
            return last_segment(old) == last_segment(new)
        return super().same(prop, old, new)

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        member_id, outputs = super().create(ctx, inputs)
        outputs["project"] = outputs[self.parent].split("/")[1]
        return member_id, outputs


class GetSecret(Function):
    token = "gcp:secretmanager/getSecret:getSecret"

    def call(self, ctx: Context, args: Plain) -> Plain:
        project = ctx.project(args)
        resource_id = f"projects/{project}/secrets/{args['secretId']}"
        found = api(ctx).get_secret(project, args["secretId"])
        if found is None:
            raise ApiError(f"{resource_id} not found")
        labels = {
            k: v
            for k, v in (found.get("labels") or {}).items()
            if k not in ("goog-pulumi-provisioned",)
        }
        automatic = "automatic" in (found.get("replication") or {})
        return {
            "id": resource_id,
            "project": project,
            "secretId": args["secretId"],
            "name": found["name"],
            "createTime": found.get("createTime", ""),
            "labels": labels,
            "effectiveLabels": found.get("labels") or {},
            "pulumiLabels": found.get("labels") or {},
            "annotations": found.get("annotations") or {},
            "effectiveAnnotations": found.get("annotations") or {},
            "replications": [
                {
                    "autos": [{"customerManagedEncryptions": []}] if automatic else [],
                    "userManageds": [],
                }
            ],
            "rotations": [],
            "topics": [],
            "versionAliases": found.get("versionAliases") or {},
            "deletionProtection": False,
        }
