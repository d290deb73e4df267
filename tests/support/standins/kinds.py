"""What one resource type or function of a stand-in provider knows: the `Kind` and `Function`
bases the gcp, random and tls stand-ins fill in, and the provider configuration they read.

A `Kind` says, per Terraform resource it imitates: which inputs force a replacement (`ForceNew`
/ `RequiresReplace`), which are Optional+Computed (left out, they keep what the cloud set), which
are sets (order does not count), Terraform's `Default:`s, the bridge's autonaming, and how to
create, read, update and delete one. The generic protocol work (check, diff, previews, secrets)
is tests/support/standins/provider.py's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from tests.support.standins.schema import Failure
from tests.support.standins.values import UNKNOWN, Plain, integral

#: Provider config keys and the environment variables Terraform's google provider reads when a key
#: is unset (hashicorp/terraform-provider-google-beta: `google-beta/envvar/envvar_utils.go` for
#: project, region and zone; `google-beta/provider/provider.go` `ConfigureProvider` for
#: GOOGLE_OAUTH_ACCESS_TOKEN and each product's `CustomEndpointEnvVar`, Secret Manager's in
#: `google-beta/services/secretmanager/product.go`).
CONFIG_ENV: dict[str, tuple[str, ...]] = {
    "project": (
        "GOOGLE_PROJECT",
        "GOOGLE_CLOUD_PROJECT",
        "GCLOUD_PROJECT",
        "CLOUDSDK_CORE_PROJECT",
    ),
    "region": ("GOOGLE_REGION", "GCLOUD_REGION", "CLOUDSDK_COMPUTE_REGION"),
    "zone": ("GOOGLE_ZONE", "GCLOUD_ZONE", "CLOUDSDK_COMPUTE_ZONE"),
    "accessToken": ("GOOGLE_OAUTH_ACCESS_TOKEN",),
    "secretManagerCustomEndpoint": ("GOOGLE_SECRET_MANAGER_CUSTOM_ENDPOINT",),
}


def fixed(**values: Any) -> Mapping[str, Any]:
    """A read-only mapping for a `Kind`'s class attributes (`defaults`, `from_provider`)."""
    return MappingProxyType(values)


class ApiError(RuntimeError):
    """An error as the real provider reports the API's answer (`googleapi: Error 404: ...`)."""


@dataclass
class Context:
    """The provider's configuration (`gcp:project`, ...), as `Configure` handed it over."""

    config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_configure(cls, package: str, variables: Mapping[str, str], args: Plain) -> Context:
        """Config from `ConfigureRequest.args` (newer engines), else `variables`
        (`gcp:config:project`), else the environment, as the Terraform provider falls back."""
        config: dict[str, str] = {}
        for key, envs in CONFIG_ENV.items():
            value = args.get(key)
            if not isinstance(value, str) or not value or value == UNKNOWN:
                value = variables.get(f"{package}:config:{key}") or variables.get(
                    f"{package}:{key}"
                )
            if not value:
                value = next((os.environ[e] for e in envs if os.environ.get(e)), "")
            if value:
                config[key] = value
        return cls(config)

    def project(self, inputs: Plain) -> str:
        """The resource's `project`, else the provider's (Terraform's `tpgresource.GetProject`)."""
        value = inputs.get("project") or self.config.get("project")
        if not value:
            raise ApiError("project: required field is not set")
        return str(value)

    def region(self, inputs: Plain) -> str:
        value = inputs.get("region") or self.config.get("region")
        if not value:
            raise ApiError("region: required field is not set")
        return str(value)


class Kind:
    """One resource type. Class attributes hold the Terraform schema facts, cited per subclass."""

    token: ClassVar[str]
    #: Inputs (wire names) whose change replaces the resource: Terraform's ForceNew.
    replace_on: ClassVar[frozenset[str]] = frozenset()
    #: Optional+Computed inputs: when left out, they keep the value in state (no diff).
    computed: ClassVar[frozenset[str]] = frozenset()
    #: TypeSet inputs: compared without order.
    unordered: ClassVar[frozenset[str]] = frozenset()
    #: Terraform's `Default:` values, which the bridge fills into the checked inputs.
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: (input, max length): pulumi-gcp's autonaming of a missing name (`<urn name>-<7 hex>`).
    autoname: ClassVar[tuple[str, int] | None] = None
    #: Inputs a missing value of which is taken from the provider config (`DefaultProviderProject`).
    from_provider: ClassVar[Mapping[str, str]] = {}
    delete_before_replace: ClassVar[bool] = False
    #: Outputs always secret (Terraform `Sensitive: true`), besides the schema's secret outputs.
    sensitive: ClassVar[frozenset[str]] = frozenset()

    def fill_nested_defaults(self, inputs: Plain) -> None:
        """Terraform's `Default:`s inside nested blocks, filled in place where the block is set
        (the bridge fills a nested block's defaults as it does the top level's)."""

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        """Terraform's ValidateFuncs and ExactlyOneOf/ConflictsWith for this type."""
        return []

    def same(self, prop: str, old: Any, new: Any) -> bool:
        """Whether two values of `prop` are one (Terraform's DiffSuppressFuncs go here)."""
        if prop in self.unordered and isinstance(old, list) and isinstance(new, list):
            return sorted(map(canonical, old)) == sorted(map(canonical, new))
        return canonical(old) == canonical(new)

    def replaces(self, prop: str, old: Any, new: Any) -> bool:
        """Whether this change of `prop` forces a new resource (nested ForceNew: override)."""
        return prop in self.replace_on

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        raise NotImplementedError

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        """The object as the cloud has it now; None when it is gone. Logical resources (random,
        tls) live only in Pulumi's state, so the default hands the state back."""
        return state

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        raise ApiError(f"{self.token} has no in-place update for this change")

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        return None


class Function:
    """One invoke (a Terraform data source)."""

    token: ClassVar[str]

    def call(self, ctx: Context, args: Plain) -> Plain:
        raise NotImplementedError


def canonical(value: Any) -> str:
    """A value in one spelling: integral floats as ints, None-valued keys dropped, sorted keys."""

    def clean(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: clean(v) for k, v in item.items() if v is not None}
        if isinstance(item, list):
            return [clean(v) for v in item]
        return integral(item)

    return json.dumps(clean(value), sort_keys=True)


def last_segment(value: Any) -> str:
    """`projects/p/secrets/s` -> `s`: Terraform's `CompareSelfLinkOrResourceName` compares
    the last segment of a self link or path with a bare name
    (`google-beta/tpgresource/self_link_helpers.go`)."""
    return str(value or "").rstrip("/").rsplit("/", 1)[-1]


def enum_failure(inputs: Plain, prop: str, allowed: list[str]) -> list[Failure]:
    """Terraform's `validation.StringInSlice` / `verify.ValidateEnum`, in its words."""
    value = inputs.get(prop)
    if value is None or value == UNKNOWN or value in allowed:
        return []
    quoted = " ".join(json.dumps(v) for v in allowed)
    return [Failure(prop, f"expected {prop} to be one of [{quoted}], got {value}")]
