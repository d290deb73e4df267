"""The `access` section: who may reach the endpoint and SSH, the HF token's secret, the VPC."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from components.config.backend import DEFAULT_BACKEND, Backend
from components.config.keys import NAMESPACE
from components.config.reader import Reader, as_bool, as_str, as_str_list
from components.ssh_dial import PER_DIAL_TIMEOUT_SECONDS, dial_budget_seconds

DEFAULT_HF_TOKEN_SECRET = "hf-token"  # noqa: S105 - a secret name, not a secret.
#: The auto-mode network most projects have; some have none, hence `access.network`.
DEFAULT_NETWORK = "default"
_SECRET_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
# A network of the stack's own project (the firewall rules are created there), RFC 1035 names.
_NETWORK_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_DOC_NETS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)


@dataclass(frozen=True)
class AccessSettings:
    allowed_cidrs: tuple[str, ...]
    allow_public: bool
    ssh_cidrs: tuple[str, ...]
    hf_token_secret: str
    allow_unverified_host_key: bool
    #: The VPC network: the node's `networkConfig.network` and the firewall rules' network.
    network: str = DEFAULT_NETWORK


def _blocked_dial_minutes() -> int:
    """How long remote commands dial a node whose firewall drops the deployer's packets."""
    return round(dial_budget_seconds(seconds_per_failed_dial=PER_DIAL_TIMEOUT_SECONDS) / 60)


def parse_access(
    r: Reader, warnings: list[str], backend: Backend | None = DEFAULT_BACKEND
) -> AccessSettings | None:
    before = len(r.problems)
    allow_public = r.get("allowPublic", as_bool, False, "true or false")
    allowed = _parse_cidrs(r, "allowedCidrs", allow_public, required=True)
    ssh = _parse_cidrs(r, "sshCidrs", allow_public, required=False)
    secret = r.get("hfTokenSecret", as_str, DEFAULT_HF_TOKEN_SECRET, "a secret name")
    if not _SECRET_ID_RE.match(secret):
        r.fail(
            "hfTokenSecret",
            secret,
            "not a Secret Manager secret id. Fix: letters, digits, _ and -, at most 255",
        )
    unverified = r.get("allowUnverifiedHostKey", as_bool, False, "true or false")
    network = r.get("network", as_str, DEFAULT_NETWORK, "a VPC network name")
    if not _NETWORK_RE.match(network):
        r.fail(
            "network",
            network,
            "not a VPC network name. Fix: the name of a network in gcp:project (lowercase "
            "letters, digits and -, e.g. default; `gcloud compute networks list` shows them)",
        )
    if len(r.problems) != before or allowed is None:
        return None
    for cidr in allowed + (ssh or ()):
        net = ipaddress.ip_network(cidr)
        if any(net.version == d.version and net.subnet_of(d) for d in _DOC_NETS):  # type: ignore[arg-type]
            warnings.append(
                f"{NAMESPACE}:access: {cidr} is a documentation range that nobody can come "
                "from; replace it with your own network before relying on the endpoint."
            )
    if backend == "gke":
        # No SSH on GKE: the pods are reached through the load balancer only.
        ignored = [k for k in ("sshCidrs", "allowUnverifiedHostKey") if k in r.values]
        if ignored:
            warnings.append(
                f"{NAMESPACE}:access.{', access.'.join(ignored)} is set, but backend gke has no "
                "SSH: it is ignored. Fix: remove it from the stack file."
            )
    elif ssh is None:
        # Outside these ranges the firewall drops the deployer's SSH packets (no reset), so every
        # dial times out and `up` fails after the whole dial budget of a billing TPU.
        warnings.append(
            f"{NAMESPACE}:access.sshCidrs is not set, so SSH admits only allowedCidrs "
            f"({', '.join(allowed)}); from outside, `pulumi up` fails after "
            f"~{_blocked_dial_minutes()} min. Fix: set {NAMESPACE}:access.sshCidrs to YOUR.IP/32."
        )
    return AccessSettings(
        allowed_cidrs=allowed,
        allow_public=allow_public,
        ssh_cidrs=ssh if ssh is not None else allowed,
        hf_token_secret=secret,
        allow_unverified_host_key=unverified,
        network=network,
    )


def _parse_cidrs(
    r: Reader, name: str, allow_public: bool, *, required: bool
) -> tuple[str, ...] | None:
    raw = r.values.get(name)
    if raw is None:
        if required:
            r.fail(
                name,
                None,
                "required: who may reach the endpoint. Fix: `pulumi config set "
                f"--path '{r.key(name)}[0]' 203.0.113.0/24` with your own range",
            )
        return None
    if isinstance(raw, str):  # `pulumi config set` without --path: "a, b" or one value
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        cidrs = as_str_list(raw)
    except TypeError:
        r.fail(name, raw, "not a list. Fix: a list of CIDR ranges such as [10.0.0.0/8]")
        return None
    if not cidrs:
        r.fail(name, [], "empty: nobody could reach the node. Fix: give at least one CIDR range")
        return None
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            r.fail(
                name,
                list(cidrs),
                f"{cidr!r} is not a CIDR range like 203.0.113.0/24 "
                "(host bits must be zero). Fix: write the network address",
            )
            return None
        if net.prefixlen == 0 and not allow_public:
            r.fail(
                name,
                list(cidrs),
                f"{cidr} opens the port to the whole internet, and "
                "/metrics, /health and /tokenize answer without the API key. Fix: list your "
                "own ranges, or set `tpu-vllm:access.allowPublic` true if you mean it",
            )
            return None
    return cidrs
