"""Who can reach the node, by GCP's own firewall rules, on a network that allows everything.

The evaluator below follows the VPC firewall rules documentation
(https://cloud.google.com/firewall/docs/firewalls, "Firewall rule components" and "Priority"):
an ingress rule applies to an instance when its target tags are empty or include one of the
instance's tags; it matches a packet when the source address is in one of its source ranges and
the protocol and port are in its allowed/denied list; of the matching rules the one with the
lowest priority number wins, a deny beating an allow of equal priority; with none, the implied
deny-all ingress rule (priority 65535) applies. An auto-mode `default` network brings
`default-allow-ssh` (tcp:22 from 0.0.0.0/0, priority 65534), `default-allow-rdp`,
`default-allow-icmp` and `default-allow-internal` (VPC docs, "Pre-populated rules in the default
network").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pytest

from components.vm.queued_resource_spec import Spec
from tests.support.pulumi_program import run_program
from tests.support.queued_resource_props import props_for

FIREWALL = "gcp:compute/firewall:Firewall"
NODE_TAG = "tpu-vllm-v5e1"
IMPLIED_DENY_PRIORITY = 65535
DEFAULT_PRIORITY = 1000  # what a rule created without a priority gets


@dataclass(frozen=True)
class Rule:
    name: str
    action: str  # "allow" | "deny"
    priority: int
    source_ranges: tuple[str, ...]
    ports: dict[str, tuple[str, ...]]  # protocol -> ports ("" = every port); "all" = every protocol
    target_tags: tuple[str, ...] = ()

    def applies_to(self, tags: set[str]) -> bool:
        return not self.target_tags or bool(tags & set(self.target_tags))

    def matches(self, source: str, protocol: str, port: int) -> bool:
        address = ipaddress.ip_address(source)
        if not any(address in ipaddress.ip_network(r) for r in self.source_ranges):
            return False
        for proto, ports in self.ports.items():
            if proto not in ("all", protocol):
                continue
            if not ports or any(_port_in(port, p) for p in ports):
                return True
        return False


def _port_in(port: int, spec: str) -> bool:
    low, _, high = spec.partition("-")
    return int(low) <= port <= int(high or low)


def admitted(rules: list[Rule], tags: set[str], source: str, protocol: str, port: int) -> bool:
    """Whether GCP lets this ingress packet reach an instance with `tags`."""
    matching = [r for r in rules if r.applies_to(tags) and r.matches(source, protocol, port)]
    if not matching:
        return False  # the implied deny-all ingress rule
    # Lowest priority number first; at equal priority deny before allow.
    winner = min(matching, key=lambda r: (r.priority, r.action != "deny"))
    return winner.action == "allow"


def default_network_rules() -> list[Rule]:
    """What an auto-mode `default` network holds, plus someone's allow-all at the default
    priority: the worst neighbour the node can have."""
    return [
        Rule("default-allow-ssh", "allow", 65534, ("0.0.0.0/0",), {"tcp": ("22",)}),
        Rule("default-allow-rdp", "allow", 65534, ("0.0.0.0/0",), {"tcp": ("3389",)}),
        Rule("default-allow-icmp", "allow", 65534, ("0.0.0.0/0",), {"icmp": ()}),
        Rule(
            "default-allow-internal",
            "allow",
            65534,
            ("10.128.0.0/9",),
            {"tcp": ("0-65535",), "udp": ("0-65535",), "icmp": ()},
        ),
        Rule("allow-all", "allow", DEFAULT_PRIORITY, ("0.0.0.0/0",), {"all": ()}),
        # Someone's allow-all placed ahead of most rules on purpose: it must not open the node.
        Rule("allow-all-early", "allow", 100, ("0.0.0.0/0",), {"all": ()}),
        Rule("allow-ssh-early", "allow", 2, ("0.0.0.0/0",), {"tcp": ("22",)}),
    ]


def program_rules(resources: list[Any]) -> list[Rule]:
    """The stack's firewall resources, read as the rules GCP would store."""
    rules = []
    for resource in resources:
        inputs = resource.inputs
        action = "allow" if inputs.get("allows") else "deny"
        entries = inputs.get("allows") or inputs.get("denies") or []
        rules.append(
            Rule(
                resource.name,
                action,
                int(inputs.get("priority", DEFAULT_PRIORITY)),
                tuple(inputs["sourceRanges"]),
                {e["protocol"]: tuple(e.get("ports") or ()) for e in entries},
                tuple(inputs.get("targetTags") or ()),
            )
        )
    return rules


SERVING = ["198.51.100.0/24", "10.0.0.0/8"]
SSH = ["192.0.2.0/28"]


@pytest.fixture(scope="module")
def rules() -> tuple[list[Any], list[Rule]]:
    run = run_program(
        "v5e1", {"tpu-vllm:access.allowedCidrs": SERVING, "tpu-vllm:access.sshCidrs": SSH}
    )
    resources = run.of_type(FIREWALL)
    return resources, program_rules(resources) + default_network_rules()


@pytest.mark.parametrize(
    ("source", "port", "expected"),
    [
        ("198.51.100.7", 8000, True),  # allowedCidrs
        ("10.1.2.3", 8000, True),
        ("192.0.2.5", 22, True),  # sshCidrs
        ("203.0.113.9", 8000, False),  # anyone else, despite allow-all
        ("203.0.113.9", 22, False),  # anyone else, despite default-allow-ssh and allow-all
        ("198.51.100.7", 22, False),  # serving ranges do not get SSH when sshCidrs is set
        ("192.0.2.5", 8000, False),  # and SSH ranges do not get the serving port
        ("10.128.0.5", 22, False),  # nor the VPC itself (default-allow-internal)
    ],
)
def test_the_node_admits_only_the_configured_ranges(
    rules: tuple[list[Any], list[Rule]], source: str, port: int, expected: bool
) -> None:
    _, all_rules = rules
    assert admitted(all_rules, {NODE_TAG}, source, "tcp", port) is expected


def test_without_the_deny_rules_the_network_would_let_everyone_in(
    rules: tuple[list[Any], list[Rule]],
) -> None:
    """What the fix changed: the allow rules alone restrict nothing."""
    _, all_rules = rules
    allows_only = [r for r in all_rules if not r.name.endswith("-deny")]
    assert admitted(allows_only, {NODE_TAG}, "203.0.113.9", "tcp", 22)
    assert admitted(allows_only, {NODE_TAG}, "203.0.113.9", "tcp", 8000)


def test_deny_rules_apply_to_the_node_tag_only_and_lose_to_the_allows(
    rules: tuple[list[Any], list[Rule]],
) -> None:
    resources, all_rules = rules
    by_name = {r.name: r for r in program_rules(resources)}
    assert set(by_name) == {"tpu-serving", "tpu-serving-deny", "tpu-ssh", "tpu-ssh-deny"}
    for what, port in (("serving", "8000"), ("ssh", "22")):
        allow, deny = by_name[f"tpu-{what}"], by_name[f"tpu-{what}-deny"]
        assert deny.source_ranges == ("0.0.0.0/0",)
        assert deny.ports == {"tcp": (port,)} and allow.ports == {"tcp": (port,)}
        assert deny.target_tags == allow.target_tags == (NODE_TAG,)
        assert allow.priority < deny.priority <= DEFAULT_PRIORITY < 65534
        # Not 0: the Terraform provider has sent an explicit 0 as its default 1000 (#3696).
        assert allow.priority > 0 and deny.priority <= 2
    # Another VM on the network keeps what the network gives it.
    assert admitted(all_rules, {"other-vm"}, "203.0.113.9", "tcp", 22)


def test_rules_and_node_use_the_configured_network() -> None:
    run = run_program("v5e1", {"tpu-vllm:access.network": "tpu-net"})
    for firewall in run.of_type(FIREWALL):
        assert firewall.inputs["network"] == "tpu-net"
    [qr] = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    assert qr.inputs["network"] == "tpu-net"
    default = run_program("v5e1")
    assert {f.inputs["network"] for f in default.of_type(FIREWALL)} == {"default"}


def test_a_bad_network_name_is_refused_before_anything_is_created() -> None:
    run = run_program("v5e1", {"tpu-vllm:access.network": "My Net"}, expect_error=True)
    assert "tpu-vllm:access.network = 'My Net'" in str(run.error)
    assert run.resources == []


def test_the_queued_resource_asks_for_the_node_on_that_network() -> None:
    spec = Spec.from_props({**props_for("v5e1"), "network": "tpu-net"})
    node = spec.body("us-west4-a")["tpu"]["nodeSpec"][0]["node"]
    assert node["networkConfig"] == {"network": "tpu-net", "enableExternalIps": True}
