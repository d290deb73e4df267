"""gcp stand-in: Cloud Monitoring (`monitoring.Dashboard`, `UptimeCheckConfig`, `AlertPolicy`,
`getUptimeCheckIPs`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/monitoring/`
(`resource_monitoring_dashboard.go`, handwritten; `resource_monitoring_uptime_check_config.go`
and `resource_monitoring_alert_policy.go`, generated from GoogleCloudPlatform/magic-modules
`mmv1/products/monitoring/UptimeCheckConfig.yaml` and `AlertPolicy.yaml`;
`data_source_google_monitoring_uptime_check_ips.go`) at 93c65b2d, just after c48a71b06b "major
release 8.0.0", the line pulumi-gcp 10.x bridges (10.2.0's docs have 8.0's `password_wo_version`
text, no longer ForceNew):
- Dashboard: `dashboard_json` Required, `validation.StringIsJSON`, kept as
  `structure.NormalizeJsonString` / `FlattenJsonToString` spell it (Go's `json.Marshal`: sorted
  keys, no spaces, `<>&` escaped) and read back as the API answers it, with its `name` and
  `etag`; `monitoringDashboardDiffSuppress` drops from the old JSON the keys the new one lacks
  (`removeComputedKeys`) before comparing; only `project` is ForceNew; an update PATCHes with the
  old `etag` (a stale one is refused). The id is the API's `name`, which it answers with the
  project's number: `projects/{number}/dashboards/{id}` (the id a UUID unless the body names
  one); a body without `displayName` is a 400 (Required in the Monitoring v1 discovery
  document). The API errors' wording is the stand-in's;
- UptimeCheckConfig (`id_format: '{{name}}'`): ForceNew `checker_type` (Optional+Computed,
  STATIC_IP_CHECKERS | VPC_CHECKERS), `monitored_resource` (its `type` and `labels`),
  `resource_group`, `synthetic_monitor`, `project`, and `http_check.request_method` (default
  GET) inside the in-place `http_check`; ExactlyOneOf `monitored_resource`, `resource_group`,
  `synthetic_monitor`; `period` default "300s", `http_check.path` default "/" (a missing leading
  "/" suppressed), `http_check.port` and `headers` Optional+Computed; the API adds `project_id`
  to the monitored resource's labels (suppressed when the inputs leave it out); `name`
  `projects/{project}/uptimeCheckConfigs/{id}` and `uptime_check_id` its last segment. The API
  assigns the id; here the display name slugged plus a random suffix. A delete while an alert
  policy still names the check (here: a condition's filter or query with its `check_id`) is a
  400, which the provider extends with " - please ensure all associated Alert Policies are
  deleted." (mmv1 `templates/terraform/custom_delete/monitoring_uptime_check_config.go.tmpl`);
- AlertPolicy (`id_format: '{{name}}'`): only `project` ForceNew; `combiner` AND | OR |
  AND_WITH_MATCHING_RESOURCE, `severity` CRITICAL | ERROR | WARNING; `enabled` default true,
  `documentation.mime_type` default "text/markdown"; `name` `projects/{project}/alertPolicies/
  {id}` (a number the API assigns), each condition's computed `name` `{name}/conditions/{id}`,
  `creation_record` (here `creationRecords`) the create's `mutateTime` and `mutatedBy`;
- every one: `deletion_policy` (`tpgresource.DeletionPolicySchemaEntry`, default DELETE):
  PREVENT refuses a delete (`DeletionPolicyPreDelete`), ABANDON leaves the object;
- getUptimeCheckIPs: the real one calls the Monitoring API's `uptimeCheckIps.list`
  (`GET https://monitoring.googleapis.com/v3/uptimeCheckIps`) and answers id
  "uptime_check_ips_id". Tests seed the list with `seed_uptime_check_ips`; unseeded,
  `DEFAULT_UPTIME_CHECK_IPS` answers: documentation addresses (RFC 5737 TEST-NET-3 and RFC 3849
  2001:db8::/32) in the API's regions, not Google's checkers.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from pathlib import Path
from typing import Any

from tests.support.standins.gcp_common import not_found, now, project_number, read_stored
from tests.support.standins.kinds import (
    ApiError,
    Context,
    Function,
    Kind,
    canonical,
    enum_failure,
    fixed,
    last_segment,
)
from tests.support.standins.schema import Failure
from tests.support.standins.store import Store
from tests.support.standins.values import UNKNOWN, Plain, integral

DASHBOARDS, UPTIME_CHECKS, ALERT_POLICIES, UPTIME_IPS = (
    "monitoring_dashboards",
    "monitoring_uptime_checks",
    "monitoring_alert_policies",
    "monitoring_uptime_check_ips",
)
#: `mutatedBy` of a creation record: the caller's email (here a documentation domain, RFC 2606).
CALLER = "standin-caller@example.com"
DEFAULT_UPTIME_CHECK_IPS: list[Plain] = [
    {"region": "USA_OREGON", "location": "The Dalles, Oregon", "ipAddress": "203.0.113.10"},
    {"region": "USA_IOWA", "location": "Council Bluffs, Iowa", "ipAddress": "203.0.113.11"},
    {"region": "USA_VIRGINIA", "location": "Ashburn, Virginia", "ipAddress": "203.0.113.12"},
    {"region": "EUROPE", "location": "Belgium", "ipAddress": "203.0.113.20"},
    {"region": "SOUTH_AMERICA", "location": "Sao Paulo", "ipAddress": "203.0.113.30"},
    {"region": "ASIA_PACIFIC", "location": "Singapore", "ipAddress": "203.0.113.40"},
    {"region": "USA_IOWA", "location": "Council Bluffs, Iowa", "ipAddress": "2001:db8::11"},
]
_SOURCES = ("monitoredResource", "resourceGroup", "syntheticMonitor")
_SOURCE_KEYS = "`monitored_resource,resource_group,synthetic_monitor`"
#: UptimeCheckConfig's enums (`verify.ValidateEnum`), by path ("a.b": in block a, lists too).
_UPTIME_ENUMS: dict[str, list[str]] = {
    "checkerType": ["STATIC_IP_CHECKERS", "VPC_CHECKERS", ""],
    "httpCheck.requestMethod": ["METHOD_UNSPECIFIED", "GET", "POST", ""],
    "httpCheck.contentType": ["TYPE_UNSPECIFIED", "URL_ENCODED", "USER_PROVIDED", ""],
    "httpCheck.acceptedResponseStatusCodes.statusClass": [
        *(f"STATUS_CLASS_{c}XX" for c in range(1, 6)),
        "STATUS_CLASS_ANY",
        "",
    ],
    "httpCheck.serviceAgentAuthentication.type": [
        "SERVICE_AGENT_AUTHENTICATION_TYPE_UNSPECIFIED",
        "OIDC_TOKEN",
        "",
    ],
    "resourceGroup.resourceType": [
        "RESOURCE_TYPE_UNSPECIFIED",
        "INSTANCE",
        "AWS_ELB_LOAD_BALANCER",
        "",
    ],
    "contentMatchers.matcher": [
        "CONTAINS_STRING",
        "NOT_CONTAINS_STRING",
        "MATCHES_REGEX",
        "NOT_MATCHES_REGEX",
        "MATCHES_JSON_PATH",
        "NOT_MATCHES_JSON_PATH",
        "",
    ],
    "contentMatchers.jsonPathMatcher.jsonMatcher": ["EXACT_MATCH", "REGEX_MATCH", ""],
}


def seed_uptime_check_ips(root: Path, ips: list[Plain]) -> None:
    """What `uptimeCheckIps.list` answers: [{region, location, ipAddress}]."""
    Store(UPTIME_IPS, root).put("uptimeCheckIps", ips)


def go_json(value: Any) -> str:
    """JSON as Go's `json.Marshal` writes a decoded object: keys sorted, no spaces, `<`, `>`,
    `&`, U+2028 and U+2029 escaped, numbers float64s (1.0 as 1) (Terraform's
    `structure.FlattenJsonToString`)."""

    def numbers(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: numbers(v) for k, v in item.items()}
        if isinstance(item, list):
            return [numbers(v) for v in item]
        return integral(item)

    text = json.dumps(numbers(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def remove_computed_keys(old: Any, new: Any) -> Any:
    """`removeComputedKeys`: the old JSON without the keys the new one leaves out, recursively
    (lists element by element, as far as the new list goes)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return old

    def kept(value: Any, other: Any) -> Any:
        if isinstance(value, list) and isinstance(other, list):
            return [
                remove_computed_keys(item, other[i]) if i < len(other) else item
                for i, item in enumerate(value)
            ]
        return remove_computed_keys(value, other)

    return {k: kept(v, new[k]) for k, v in old.items() if new.get(k) is not None}


def _parsed(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _deletes(state: Plain, resource_id: str) -> bool:
    """`DeletionPolicyPreDelete`: whether the object is to be deleted (False: ABANDON)."""
    policy = state.get("deletionPolicy")
    if policy == "PREVENT":
        raise ApiError(
            f'cannot destroy "{resource_id}" without setting deletion_policy="DELETE" and '
            "running `terraform apply`"
        )
    return policy != "ABANDON"


def _names_check(value: Any, check_id: str) -> bool:
    """Whether a filter or query in `value` selects uptime check `check_id` (by its label)."""
    if isinstance(value, dict):
        return any(_names_check(v, check_id) for v in value.values())
    if isinstance(value, list):
        return any(_names_check(v, check_id) for v in value)
    return isinstance(value, str) and "check_id" in value and f'"{check_id}"' in value


def _nested_enum(inputs: Plain, path: str, allowed: list[str]) -> list[Failure]:
    """`verify.ValidateEnum` on `a.b.c` (lists of blocks: every element)."""
    *parents, prop = path.split(".")
    blocks: list[tuple[str, Any]] = [("", inputs)]
    for parent in parents:
        found: list[tuple[str, Any]] = []
        for where, block in blocks:
            value = block.get(parent) if isinstance(block, dict) else None
            if isinstance(value, list):
                found += [(f"{where}{parent}[{i}].", item) for i, item in enumerate(value)]
            elif isinstance(value, dict):
                found.append((f"{where}{parent}.", value))
        blocks = found
    return [
        Failure(f"{where}{f.property}", f.reason)
        for where, block in blocks
        if isinstance(block, dict)
        for f in enum_failure(block, prop, allowed)
    ]


class Dashboard(Kind):
    token = "gcp:monitoring/dashboard:Dashboard"
    replace_on = frozenset(["project"])
    computed = frozenset(["project", "deletionPolicy"])
    from_provider = fixed(project="project")

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        value = inputs.get("dashboardJson")
        if not isinstance(value, str) or value in ("", UNKNOWN):
            return []
        try:
            json.loads(value)
        except ValueError as error:
            return [Failure("dashboardJson", f'"dashboard_json" contains an invalid JSON: {error}')]
        return []

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "dashboardJson":
            olds, news = _parsed(old), _parsed(new)
            if olds is None or news is None:
                return bool(old == new)
            return canonical(remove_computed_keys(olds, news)) == canonical(news)
        return super().same(prop, old, new)

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        body = _parsed(inputs["dashboardJson"])
        if not isinstance(body, dict) or not body.get("displayName"):
            raise ApiError(
                "Error creating Dashboard: googleapi: Error 400: displayName is required., "
                "badRequest"
            )
        dashboard_id = last_segment(body["name"]) if body.get("name") else str(uuid.uuid4())
        name = f"projects/{project_number(project)}/dashboards/{dashboard_id}"
        answer = {**body, "name": name, "etag": secrets.token_hex(16)}
        if not Store(DASHBOARDS).insert(name, answer):
            raise ApiError(
                f"Error creating Dashboard: googleapi: Error 409: {name} already exists., "
                "alreadyExists"
            )
        return name, {**inputs, "project": project, "dashboardJson": go_json(answer)}

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        found = Store(DASHBOARDS).get(resource_id)
        return {**state, "dashboardJson": go_json(found)} if found else None

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store(DASHBOARDS)
        found = store.get(resource_id)
        if found is None:
            raise not_found(f"Dashboard {resource_id}")
        body = _parsed(news["dashboardJson"]) or {}
        sent = (_parsed(olds.get("dashboardJson")) or {}).get("etag")
        if sent and sent != found.get("etag"):
            raise ApiError(
                f'Error updating Dashboard "{resource_id}": googleapi: Error 409: the etag '
                "does not match the dashboard's, aborted"
            )
        answer = {**body, "name": resource_id, "etag": secrets.token_hex(16)}
        store.put(resource_id, answer)
        return {**olds, **news, "project": olds["project"], "dashboardJson": go_json(answer)}

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if _deletes(state, resource_id):
            Store(DASHBOARDS).delete(resource_id)


class UptimeCheckConfig(Kind):
    token = "gcp:monitoring/uptimeCheckConfig:UptimeCheckConfig"
    replace_on = frozenset(["checkerType", *_SOURCES, "project"])
    computed = frozenset(["project", "checkerType", "deletionPolicy"])
    from_provider = fixed(project="project")
    defaults = fixed(period="300s")

    def fill_nested_defaults(self, inputs: Plain) -> None:
        http = inputs.get("httpCheck")
        if isinstance(http, dict):
            for key, default in (("path", "/"), ("requestMethod", "GET")):
                if http.get(key) is None:
                    http[key] = default
        matchers = inputs.get("contentMatchers")
        for matcher in matchers if isinstance(matchers, list) else []:
            if not isinstance(matcher, dict):
                continue
            if matcher.get("matcher") is None:
                matcher["matcher"] = "CONTAINS_STRING"
            json_path = matcher.get("jsonPathMatcher")
            if isinstance(json_path, dict) and json_path.get("jsonMatcher") is None:
                json_path["jsonMatcher"] = "EXACT_MATCH"

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = [
            failure
            for path, allowed in _UPTIME_ENUMS.items()
            for failure in _nested_enum(inputs, path, allowed)
        ]
        # ExactlyOneOf, in terraform-plugin-sdk v2's words (`validateExactlyOneAttribute`),
        # reported on each of the three; an unknown value may yet be the one.
        given = [p for p in _SOURCES if inputs.get(p) is not None and inputs.get(p) != UNKNOWN]
        unknown = any(inputs.get(p) == UNKNOWN for p in _SOURCES)
        snake = {p: re.sub(r"([A-Z])", r"_\1", p).lower() for p in _SOURCES}
        if not given and not unknown:
            failures += [
                Failure(p, f'"{snake[p]}": one of {_SOURCE_KEYS} must be specified')
                for p in _SOURCES
            ]
        elif len(given) > 1:
            named = ",".join(sorted(snake[p] for p in given))
            failures += [
                Failure(
                    p,
                    f'"{snake[p]}": only one of {_SOURCE_KEYS} can be specified, but `{named}` '
                    "were specified.",
                )
                for p in _SOURCES
            ]
        return failures

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if isinstance(old, dict) and isinstance(new, dict):
            seen = dict(old)
            if prop == "httpCheck":
                # Optional+Computed `port` and `headers`; `path` "/x" read back for "x".
                seen = {k: v for k, v in old.items() if k not in ("port", "headers") or k in new}
                if isinstance(new.get("path"), str) and seen.get("path") == "/" + new["path"]:
                    seen["path"] = new["path"]
            elif prop == "monitoredResource" and isinstance(old.get("labels"), dict):
                labels = dict(old["labels"])
                if not (new.get("labels") or {}).get("project_id"):
                    labels.pop("project_id", None)
                seen["labels"] = labels
            elif prop == "resourceGroup" and last_segment(old.get("groupId")) == last_segment(
                new.get("groupId")
            ):
                seen["groupId"] = new.get("groupId")
            return canonical(seen) == canonical(new)
        return super().same(prop, old, new)

    def replaces(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "httpCheck":  # its ForceNew `request_method` (a block added or gone too)
            before = old.get("requestMethod") if isinstance(old, dict) else None
            if isinstance(new, dict):
                return bool(before != new.get("requestMethod"))
            return new is None and before is not None
        return prop in self.replace_on

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        slug = re.sub(r"[^a-z0-9]+", "-", str(inputs["displayName"]).lower()).strip("-")
        check_id = f"{slug[:50] or 'uptime-check'}-{secrets.token_hex(5)}"
        name = f"projects/{project}/uptimeCheckConfigs/{check_id}"
        # CHECKER_TYPE_UNSPECIFIED: "Currently converted to STATIC_IP_CHECKERS on creation".
        checker = inputs.get("checkerType") or "STATIC_IP_CHECKERS"
        answer = {**inputs, "name": name, "checkerType": checker}
        resource = inputs.get("monitoredResource")
        if isinstance(resource, dict):
            labels = {"project_id": project, **(resource.get("labels") or {})}
            answer["monitoredResource"] = {**resource, "labels": labels}
        http = inputs.get("httpCheck")
        if isinstance(http, dict):
            path = str(http.get("path") or "/")
            port = http.get("port") or (443 if http.get("useSsl") else 80)
            answer["httpCheck"] = {**http, "path": path if path.startswith("/") else f"/{path}"}
            answer["httpCheck"]["port"] = port
        outputs = {**answer, "project": project, "uptimeCheckId": check_id}
        Store(UPTIME_CHECKS).put(name, outputs)
        return name, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored(UPTIME_CHECKS, resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store(UPTIME_CHECKS)
        if store.get(resource_id) is None:
            raise not_found(f"UptimeCheckConfig {resource_id}")
        keep = {k: olds[k] for k in ("name", "uptimeCheckId", "project", "checkerType")}
        outputs = {**olds, **news, **keep}
        if isinstance(news.get("httpCheck"), dict):
            computed = {k: v for k, v in (olds.get("httpCheck") or {}).items() if k == "port"}
            outputs["httpCheck"] = {**computed, **news["httpCheck"]}
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if not _deletes(state, resource_id):
            return
        for policy in Store(ALERT_POLICIES).all().values():
            if _names_check(policy.get("conditions"), last_segment(resource_id)):
                raise ApiError(
                    "Error when reading or editing UptimeCheckConfig: googleapi: Error 400: "
                    f"{resource_id} is in use by alert policy {policy['name']}., badRequest - "
                    "please ensure all associated Alert Policies are deleted."
                )
        Store(UPTIME_CHECKS).delete(resource_id)


class AlertPolicy(Kind):
    token = "gcp:monitoring/alertPolicy:AlertPolicy"
    replace_on = frozenset(["project"])
    computed = frozenset(["project", "deletionPolicy"])
    from_provider = fixed(project="project")
    defaults = fixed(enabled=True)

    def fill_nested_defaults(self, inputs: Plain) -> None:
        documentation = inputs.get("documentation")
        if isinstance(documentation, dict) and documentation.get("mimeType") is None:
            documentation["mimeType"] = "text/markdown"

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        return enum_failure(
            inputs, "combiner", ["AND", "OR", "AND_WITH_MATCHING_RESOURCE"]
        ) + enum_failure(inputs, "severity", ["CRITICAL", "ERROR", "WARNING", ""])

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "conditions" and isinstance(old, list) and isinstance(new, list):
            # Each condition's `name` is Computed: left out of the inputs, it is no change.
            seen = [
                {k: v for k, v in c.items() if k != "name" or (i < len(new) and "name" in new[i])}
                if isinstance(c, dict)
                else c
                for i, c in enumerate(old)
            ]
            return canonical(seen) == canonical(new)
        return super().same(prop, old, new)

    @staticmethod
    def _named(name: str, conditions: Any, olds: Any = None) -> Any:
        """The conditions as the API answers them: each with its `name` (kept on an update)."""
        if not isinstance(conditions, list):
            return conditions
        before = olds if isinstance(olds, list) else []
        named = []
        for index, condition in enumerate(conditions):
            kept = before[index].get("name") if index < len(before) else None
            condition_id = kept or f"{name}/conditions/{10**18 + secrets.randbelow(9 * 10**18)}"
            named.append({**condition, "name": condition.get("name") or condition_id})
        return named

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        name = f"projects/{project}/alertPolicies/{10**18 + secrets.randbelow(9 * 10**18)}"
        outputs = {
            **inputs,
            "project": project,
            "name": name,
            "conditions": self._named(name, inputs.get("conditions")),
            "creationRecords": [{"mutateTime": now(), "mutatedBy": CALLER}],
        }
        Store(ALERT_POLICIES).put(name, outputs)
        return name, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored(ALERT_POLICIES, resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store(ALERT_POLICIES)
        if store.get(resource_id) is None:
            raise not_found(f"AlertPolicy {resource_id}")
        keep = {k: olds[k] for k in ("name", "project", "creationRecords")}
        conditions = self._named(resource_id, news.get("conditions"), olds.get("conditions"))
        outputs = {**olds, **news, **keep, "conditions": conditions}
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if _deletes(state, resource_id):
            Store(ALERT_POLICIES).delete(resource_id)


class GetUptimeCheckIps(Function):
    token = "gcp:monitoring/getUptimeCheckIPs:getUptimeCheckIPs"

    def call(self, ctx: Context, args: Plain) -> Plain:
        found = Store(UPTIME_IPS).get("uptimeCheckIps")
        ips = found if found is not None else DEFAULT_UPTIME_CHECK_IPS
        return {
            "id": "uptime_check_ips_id",
            "uptimeCheckIps": [
                {k: ip.get(k, "") for k in ("region", "location", "ipAddress")} for ip in ips
            ],
        }
