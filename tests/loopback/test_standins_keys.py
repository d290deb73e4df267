"""The stand-in providers' coverage and schema, and the random and tls stand-ins, driven over
gRPC as the engine drives a plugin (tests/support/standins/client.py).

- every resource type and invoke the program uses (found in its source, and registered by the
  VM and GKE stacks under mocks) is served by a stand-in and present in the trimmed schema;
- the trimmed schemas are what tests/support/standins/schema_trim.py makes from the pinned SDKs;
- tls makes real keys (parsed back with `cryptography` and `ssh-keygen`); random draws fresh
  passwords that honour `length` and `special`; secret outputs come back secret.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import hashlib
import importlib
import inspect
import json
import re
import shutil
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from pulumi.provider.experimental.provider import CheckRequest
from pulumi.runtime import rpc

from tests.support.mock_outputs import MANAGED_ZONE, existing_cluster
from tests.support.pulumi_program import ROOT, run_program
from tests.support.standins import gcp_provider, random_provider, schema_trim, tls_provider
from tests.support.standins.client import Plugin, urn
from tests.support.standins.provider import StandinProvider
from tests.support.standins.schema import PACKAGES, load
from tests.support.standins.values import marshal

KEY = "tls:index/privateKey:PrivateKey"
PASSWORD = "random:index/randomPassword:RandomPassword"
SDK_OF = {"gcp": "pulumi_gcp", "random": "pulumi_random", "tls": "pulumi_tls"}
#: Every monitoring resource on: the uptime check, and alert policies (they need a channel).
WATCHED = {
    "tpu-vllm:monitoring.uptimeCheck": True,
    "tpu-vllm:monitoring.notificationChannels": [
        "projects/test-project/notificationChannels/1234567890"
    ],
}


def program_uses() -> set[str]:
    """Tokens of every `gcp.` / `random.` / `tls.` resource class and invoke the program calls."""
    tokens: set[str] = set()
    for path in [ROOT / "__main__.py", *sorted((ROOT / "components").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            chain = ast.unparse(node.func).split(".")
            if chain[0] not in SDK_OF or len(chain) < 2:
                continue
            target = importlib.import_module(SDK_OF[chain[0]])
            for part in chain[1:]:
                target = getattr(target, part)
            source = inspect.getsource(target)
            found = re.search(r"(?:invoke\(|__init__\(\s*)'([a-z]+:[^']+)'", source)
            if found and not chain[-1].endswith("Args"):
                tokens.add(found.group(1))
    return tokens


def served() -> dict[str, set[str]]:
    providers = {
        "gcp": gcp_provider.provider(),
        "random": StandinProvider("random", [random_provider.RandomPassword()], []),
        "tls": StandinProvider("tls", [tls_provider.PrivateKey()], []),
    }
    return {name: set(p.kinds) | set(p.functions) for name, p in providers.items()}


def test_every_type_and_invoke_the_program_uses_is_served_and_in_the_schema() -> None:
    used = program_uses()
    assert {"gcp:secretmanager/getSecret:getSecret", KEY, PASSWORD} <= used
    runs = [
        run_program("v5e1"),
        run_program("v5e1", {"tpu-vllm:dns": {"managedZone": MANAGED_ZONE, "name": "gemma"}}),
        run_program("v6e4-gke"),
        run_program("v6e4-gke", {"tpu-vllm:gke.cluster": "shared"}, call=existing_cluster()),
    ]
    for run in runs:
        assert run.error is None
        used |= {r.type for r in run.resources if r.custom and r.type.split(":")[0] in SDK_OF}
        used |= {token for token, _ in run.calls if token.split(":")[0] in SDK_OF}
    serving = served()
    for token in sorted(used):
        package = token.split(":")[0]
        schema = load(package).data
        assert token in serving[package], f"no stand-in serves {token}"
        assert token in schema["resources"] or token in schema["functions"], token
    assert "gcp:container/getCluster:getCluster" in used
    assert "gcp:container/cluster:Cluster" in used


@pytest.mark.parametrize("package", list(schema_trim.WANTED))
def test_the_schema_comes_from_the_pinned_sdk(package: str) -> None:
    """Made from the installed SDK, the one requirements.txt pins; nothing of it is committed."""
    made = schema_trim.trimmed(package)
    [name] = [n for n, p in PACKAGES.items() if p == package]
    assert load(name).data == json.loads(json.dumps(made))
    requirement = (ROOT / "requirements.txt").read_text()
    assert f"{package}=={made['version']}" in requirement.replace("-", "_")
    assert not (ROOT / "tests" / "support" / "fixtures" / "pulumi_schemas").exists()


def test_schema_names_what_each_resource_requires() -> None:
    gcp = load("gcp").data["resources"]
    assert gcp["gcp:compute/firewall:Firewall"]["requiredInputs"] == ["network"]
    assert gcp["gcp:secretmanager/secret:Secret"]["requiredInputs"] == ["replication"]
    assert load("tls").data["resources"][KEY]["requiredInputs"] == ["algorithm"]


@pytest.fixture
def tls() -> Iterator[Plugin]:
    with Plugin("tls") as plugin:
        plugin.configure("tls", {})
        yield plugin


@pytest.fixture
def random() -> Iterator[Plugin]:
    with Plugin("random") as plugin:
        plugin.configure("random", {})
        yield plugin


def test_tls_makes_a_real_ed25519_key_in_the_providers_encodings(
    tls: Plugin, tmp_path: Path
) -> None:
    resource_id, out = tls.up(KEY, "ssh-key", {"algorithm": "ED25519"})
    key = serialization.load_ssh_private_key(out["privateKeyOpenssh"].encode(), password=None)
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    pem = serialization.load_pem_private_key(out["privateKeyPem"].encode(), password=None)
    assert isinstance(pem, ed25519.Ed25519PrivateKey)
    assert pem.private_bytes_raw() == key.private_bytes_raw()
    assert out["privateKeyPem"].startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8 for ED25519
    public = key.public_key()
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert out["publicKeyOpenssh"] == line.decode() + "\n"
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert resource_id == hashlib.sha1(der).hexdigest()  # noqa: S324 - the provider's id
    if shutil.which("ssh-keygen"):
        private = tmp_path / "id"
        private.write_text(out["privateKeyOpenssh"])
        private.chmod(0o600)
        derived = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True
        )
        assert derived.stdout.split()[:2] == out["publicKeyOpenssh"].split()[:2]
        (tmp_path / "id.pub").write_text(out["publicKeyOpenssh"])
        listed = subprocess.run(
            ["ssh-keygen", "-l", "-f", str(tmp_path / "id.pub")],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out["publicKeyFingerprintSha256"] in listed.stdout


def test_tls_private_key_outputs_are_secret_and_algorithm_replaces(tls: Plugin) -> None:
    resource_id, outputs, secret = tls.create(urn(KEY, "k"), {"algorithm": "ED25519"})
    assert {"privateKeyPem", "privateKeyPemPkcs8", "privateKeyOpenssh"} <= secret
    assert "publicKeyOpenssh" not in secret
    diff = tls.diff(urn(KEY, "k"), resource_id, outputs, {"algorithm": "RSA"})
    assert list(diff.replaces) == ["algorithm"]
    same = tls.diff(urn(KEY, "k"), resource_id, outputs, {"algorithm": "ED25519"})
    assert same.changes == same.DIFF_NONE
    _, failures, _ = tls.check(urn(KEY, "k"), {"algorithm": "DSA"})
    assert failures and failures[0][0] == "algorithm" and "DSA" in failures[0][1]
    _, failures, _ = tls.check(urn(KEY, "k"), {})
    assert failures == [
        (
            "algorithm",
            'Missing required argument. The argument "algorithm" is required, but no '
            "definition was found.",
        )
    ]


def test_random_passwords_are_fresh_honour_length_and_special_and_stay_secret(
    random: Plugin,
) -> None:
    results = []
    for name in ("a", "b"):
        resource_id, out, secret = random.create(
            urn(PASSWORD, name), {"length": 48.0, "special": False}
        )
        assert resource_id == "none"
        assert {"result", "bcryptHash"} <= secret
        assert len(out["result"]) == 48
        assert set(out["result"]) <= set(string.ascii_letters + string.digits)
        assert bcrypt.checkpw(out["result"].encode(), out["bcryptHash"].encode())
        results.append(out["result"])
    assert results[0] != results[1]
    _, special, _ = random.create(urn(PASSWORD, "c"), {"length": 64.0, "minSpecial": 5.0})
    assert sum(c in random_provider.SPECIAL for c in special["result"]) >= 5


def test_random_password_length_change_replaces_and_bad_lengths_fail_check(random: Plugin) -> None:
    resource_id, outputs, _ = random.create(urn(PASSWORD, "p"), {"length": 48.0, "special": False})
    diff = random.diff(urn(PASSWORD, "p"), resource_id, outputs, {"length": 32.0, "special": False})
    assert list(diff.replaces) == ["length"]
    same = random.diff(urn(PASSWORD, "p"), resource_id, outputs, {"length": 48.0, "special": False})
    assert same.changes == same.DIFF_NONE
    _, failures, _ = random.check(urn(PASSWORD, "p"), {"length": 2.0, "minUpper": 3.0})
    assert failures and failures[0][0] == "length"
    _, failures, _ = random.check(urn(PASSWORD, "p"), {"length": "long"})
    assert failures == [("length", "expected type of length to be int")]


def test_logical_resources_keep_their_state_across_processes() -> None:
    """Random and tls live in Pulumi's state: a new process reads back what the old made."""
    with Plugin("tls") as first:
        first.configure("tls", {})
        resource_id, outputs = first.up(KEY, "k", {"algorithm": "ED25519"})
    with Plugin("tls") as second:
        second.configure("tls", {})
        read_id, read = second.read(urn(KEY, "k"), resource_id, outputs, {"algorithm": "ED25519"})
    assert read_id == resource_id
    assert read["privateKeyOpenssh"] == outputs["privateKeyOpenssh"]
    assert base64.b64decode(read["publicKeyOpenssh"].split()[1])


def _engine_inputs(value: Any) -> tuple[Any, bool]:
    """A mocked resource's recorded input as the engine would send it: secrets unwrapped."""
    if isinstance(value, dict) and rpc._special_sig_key in value:
        return value["value"], True
    return value, False


@pytest.mark.parametrize(
    ("stack", "changes"),
    [
        ("v5e1", {"tpu-vllm:dns": {"managedZone": MANAGED_ZONE, "name": "gemma"}}),
        ("v6e4-gke", {}),
        ("v5e1", WATCHED),
        ("v6e4-gke", WATCHED),
    ],
)
def test_the_programs_own_inputs_pass_the_stand_ins_checks(
    stack: str, changes: dict[str, Any]
) -> None:
    """What the program registers (under mocks) is what pulumi-gcp's schema and Terraform's
    validators accept: no stand-in refuses the real program."""
    providers = {
        "gcp": gcp_provider.provider(),
        "random": StandinProvider("random", [random_provider.RandomPassword()], []),
        "tls": StandinProvider("tls", [tls_provider.PrivateKey()], []),
    }
    checked = 0
    loop = asyncio.new_event_loop()  # its own: asyncio.run would unset the mocks' loop
    for resource in run_program(stack, changes).resources:
        provider = providers.get(resource.type.split(":")[0])
        if provider is None or not resource.custom:
            continue
        inputs, secret = {}, set()
        for key, value in resource.inputs.items():
            inputs[key], is_secret = _engine_inputs(value)
            if is_secret:
                secret.add(key)
        request = CheckRequest(urn(resource.type, resource.name), {}, marshal(inputs, secret), b"s")
        response = loop.run_until_complete(provider.check(request))
        failures = [(f.property, f.reason) for f in response.failures or []]
        assert failures == [], (resource.type, resource.name, failures)
        checked += 1
    loop.close()
    assert checked >= 8


def test_the_plugin_starts_in_a_directory_with_a_tests_package_of_its_own(tmp_path: Path) -> None:
    """The engine starts plugins in the program's directory; another checkout's `tests/` there
    must not shadow the stand-ins (the launcher runs python with `-P`)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    with Plugin("tls", cwd=tmp_path) as plugin:
        plugin.configure("tls", {})
        assert plugin.up(KEY, "k", {"algorithm": "ED25519"})[0]
