"""The stand-in plugins under the real Pulumi CLI: preview, up, a second preview that changes
nothing, refresh and destroy of one program with resources of all three providers (among them
the monitoring the program declares, from its own bodies: the dashboard's JSON, the uptime
check's and the alert's nested defaults and computed fields must not show as changes).

The CLI is the one scripts/engine/build.sh builds from the Go module proxy, found as every
engine test finds it (tests/support/engine.py): skipped without it, failed under
TPU_VLLM_REQUIRE_ENGINE=1 (CI). The program is an inline
Automation API program: the SDK serves it to the CLI itself (`--client`), so no Python language
host binary is needed. Offline, as the CLI runs here: a file backend and a passphrase in a
temporary PULUMI_HOME, no update check, no plugin download; the engine finds the stand-ins as
ambient plugins on PATH (`sdk/go/common/workspace/plugins.go`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random
import pulumi_tls as tls
import pytest
from pulumi import automation as auto

from components import monitoring_bodies as bodies
from components import vllm_metrics as vm
from components.vm.queued_resource_spec import node_ids
from tests.support import engine
from tests.support.fakes.secret_manager import ApiError as SecretManagerError
from tests.support.fakes.secret_manager import FakeSecretManager
from tests.support.standins.client import BIN
from tests.support.standins.store import STATE_ENV, everything

pytestmark = pytest.mark.engine
PROJECT = "proj-engine"


def program() -> None:
    key = tls.PrivateKey("ssh-key", algorithm="ED25519")
    password = random.RandomPassword("api-key", length=48, special=False)
    account = gcp.serviceaccount.Account("node", account_id="tpu-vllm-engine")
    secret = gcp.secretmanager.Secret(
        "api-key-secret",
        secret_id="tpu-vllm-engine-api-key",
        replication=gcp.secretmanager.SecretReplicationArgs(
            auto=gcp.secretmanager.SecretReplicationAutoArgs()
        ),
    )
    version = gcp.secretmanager.SecretVersion(
        "api-key-version", secret=secret.id, secret_data=password.result
    )
    gcp.compute.Firewall(
        "serving",
        network="default",
        source_ranges=["203.0.113.0/24"],
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["8000"])],
    )
    found = gcp.secretmanager.get_secret_output(secret_id="hf-token")
    gcp.projects.IAMMember(
        "metric-writer",
        project=PROJECT,
        role="roles/monitoring.metricWriter",
        member=account.email.apply(lambda email: f"serviceAccount:{email}"),
    )
    ips = gcp.monitoring.get_uptime_check_i_ps()
    check = gcp.monitoring.UptimeCheckConfig(
        "health", **bodies.pulumi_args(bodies.uptime_check("engine", PROJECT, "198.51.100.7", 8000))
    )

    def watch(check_id: str) -> bodies.Watch:
        return bodies.Watch(
            "engine", "vm", vm.queries_for("engine"), None, check_id, node_ids("engine")
        )

    def down(check_id: str) -> dict[str, Any]:
        return bodies.pulumi_args(bodies.alert_policies(watch(check_id), [])["endpoint-down"])

    policy = check.uptime_check_id.apply(down)

    def part(key: str) -> pulumi.Output[Any]:
        return policy.apply(lambda body: body[key])

    parts: dict[str, Any] = {key: part(key) for key in down("ID")}
    gcp.monitoring.AlertPolicy("down", **parts)
    gcp.monitoring.Dashboard(
        "dashboard",
        dashboard_json=check.uptime_check_id.apply(
            lambda check_id: json.dumps(bodies.dashboard(watch(check_id)), sort_keys=True, indent=1)
        ),
    )
    pulumi.export("public_key", key.public_key_openssh)
    pulumi.export("api_key", password.result)
    pulumi.export("email", account.email)
    pulumi.export("version", version.name)
    pulumi.export("hf_token_secret", found.name)
    pulumi.export("uptime_check_ips", len(ips.uptime_check_ips))


@pytest.fixture
def stack(
    tmp_path: Path, fake_secret_manager: FakeSecretManager
) -> Iterator[tuple[auto.Stack, dict[str, str]]]:
    # The CLI scripts/engine/build.sh made: a skip without it, a failure in CI
    # (tests/support/engine.py).
    bin_dir = engine.tools().bin_dir
    fake_secret_manager.add_secret(PROJECT, "hf-token")
    env = {
        "PATH": f"{BIN}:{bin_dir}:{os.environ.get('PATH', '')}",
        "PULUMI_HOME": str(tmp_path / "home"),
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'backend'}",
        "PULUMI_CONFIG_PASSPHRASE": "stand-in engine test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        STATE_ENV: str(tmp_path / "cloud"),
        "TPU_VLLM_STANDIN_PYTHON": sys.executable,
        "GOOGLE_SECRET_MANAGER_CUSTOM_ENDPOINT": f"{fake_secret_manager.url}/v1/",
        "GOOGLE_OAUTH_ACCESS_TOKEN": fake_secret_manager.token,
    }
    (tmp_path / "backend").mkdir()
    command = auto.PulumiCommand(root=str(bin_dir.parent), skip_version_check=True)
    options = auto.LocalWorkspaceOptions(
        pulumi_command=command,
        env_vars=env,
        project_settings=auto.ProjectSettings(name="standins", runtime="python"),
    )
    created = auto.create_stack("engine", project_name="standins", program=program, opts=options)
    created.set_config("gcp:project", auto.ConfigValue(PROJECT))
    yield created, env


def test_the_real_engine_runs_the_stand_ins_from_up_to_destroy(
    stack: tuple[auto.Stack, dict[str, str]], fake_secret_manager: FakeSecretManager, tmp_path: Path
) -> None:
    created, _ = stack
    assert created.preview().change_summary == {"create": 11}
    up = created.up()
    assert up.summary.result == "succeeded"
    outputs = up.outputs
    assert outputs["public_key"].value.startswith("ssh-ed25519 ")
    assert outputs["email"].value == f"tpu-vllm-engine@{PROJECT}.iam.gserviceaccount.com"
    assert outputs["api_key"].secret and len(outputs["api_key"].value) == 48
    number = fake_secret_manager.project_number(PROJECT)
    assert (
        outputs["version"].value == f"projects/{number}/secrets/tpu-vllm-engine-api-key/versions/1"
    )
    assert outputs["hf_token_secret"].value == f"projects/{number}/secrets/hf-token"
    assert outputs["uptime_check_ips"].value >= 3
    api_key = outputs["api_key"].value
    assert fake_secret_manager.payload(PROJECT, "tpu-vllm-engine-api-key") == api_key.encode()
    [state_file] = (tmp_path / "backend").rglob("engine.json")
    state = state_file.read_text()
    assert '"secretData"' in state and "tpu-vllm-engine@" in state
    assert api_key not in state  # secret outputs are encrypted in the stack's state
    assert "BEGIN OPENSSH PRIVATE KEY" not in state and "BEGIN PRIVATE KEY" not in state
    again = created.preview()
    assert again.change_summary == {"same": 11}  # no spurious diff: autonames, sets, JSON hold
    assert created.refresh().summary.result == "succeeded"
    assert created.preview().change_summary == {"same": 11}
    assert created.destroy().summary.result == "succeeded"
    assert everything(tmp_path / "cloud") == {}
    assert len(fake_secret_manager.calls("versions.destroy")) == 1
    assert len(fake_secret_manager.calls("secrets.delete")) == 1
    with pytest.raises(SecretManagerError, match="not found"):
        fake_secret_manager.secret(PROJECT, "tpu-vllm-engine-api-key")
