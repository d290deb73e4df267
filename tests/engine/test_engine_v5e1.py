"""`v5e1` through the real Pulumi CLI, step by step, as the README runs it
(tests/support/engine_stack.py).

One stack's life, one test per step, in order (they share the module's stack; under
pytest-xdist the suite's scheduler keeps them on one worker, in order: tests/conftest.py):
preview, up, the outputs, the state, a second up, a consumer's StackReference, the run's end,
destroy. A step whose predecessor failed fails at once, naming it.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine_stack import (
    HF_TOKEN,
    PASSPHRASE,
    PROJECT,
    Lifecycle,
    engine_stack,
    events,
    steps,
)
from tests.support.output_contract import problems

pytestmark = pytest.mark.engine

STACK = "v5e1"
MODEL = "google/gemma-4-E2B-it"
QR_ID = "tpu-vllm-v5e1"
API_KEY_SECRET = "tpu-vllm-v5e1-api-key"


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    with engine_stack(tmp_path_factory.mktemp("engine-v5e1"), STACK) as engine:
        yield Lifecycle(engine)


def sentinels(life: Lifecycle) -> dict[str, str]:
    """The secrets whose values must never show in plain text: the HF token (we chose it),
    the API key and the SSH private key (the stack made them: read back with --show-secrets),
    and the state's passphrase."""
    found = {"HF token": HF_TOKEN, "passphrase": PASSPHRASE}
    shown = life.memo.get("secret_outputs") or {}
    if shown:
        found["API key"] = str(shown["api_key"])
        # The key's base64 body lines, without the armour every OpenSSH key shares.
        body = [
            line
            for line in str(shown["ssh_private_key"]).splitlines()
            if line and not line.startswith("-----")
        ]
        found["SSH private key"] = max(body, key=len)
    return found


def assert_no_sentinel(text: str, life: Lifecycle, where: str) -> None:
    for name, value in sentinels(life).items():
        assert value not in text, f"the {name} shows in plain text in {where}"
        encoded = base64.b64encode(value.encode()).decode()
        assert encoded not in text, f"the {name} shows base64-encoded in {where}"


def test_preview_shows_the_plan_and_no_secret(life: Lifecycle) -> None:
    with life.step("preview"):
        engine = life.engine
        run = engine.pulumi("preview", "--diff").check()
        out = run.output
        for name in ("tpu-qr", "node-host-key", "secrets-fetch", "vllm-start", "vllm-ready"):
            assert name in out, f"{name} missing from the preview"
        assert re.search(r"\+\s+\d+ to create", out), out[-2000:]
        assert_no_sentinel(out, life, "the preview")
        # The pin's check resolved the tag at preview: the digest is in the plan already.
        nightly = engine.fakes.registry.digest("vllm/vllm-tpu", "nightly")
        assert f"vllm/vllm-tpu@{nightly}" in out
        # A preview requests nothing: no TPU, no node.
        assert engine.fakes.tpu.requests_for("queuedResources.create") == []
        assert engine.fakes.fleet.history == []


def test_up_requests_the_tpu_dials_the_node_and_waits_for_readiness(life: Lifecycle) -> None:
    with life.step("up", after="preview"):
        engine = life.engine
        log = engine.work / "up.events.jsonl"
        run = engine.up(events=log).check()
        life.memo["up_output"] = run.output
        [create] = engine.fakes.tpu.requests_for("queuedResources.create")
        body = create.body
        assert create.query["queuedResourceId"].startswith(QR_ID)
        assert body["provisioningModel"] == "FLEX_START"
        assert body["runDuration"]["maxRunDuration"] == "14400s"
        node = body["tpu"]["nodeSpec"][0]["node"]
        assert node["acceleratorType"] == "v5litepod-1"
        assert "ssh-keys" in node["metadata"] and HF_TOKEN not in json.dumps(body)
        # The node's VM: pulumi-command dialled its sshd as the metadata's user, with the key
        # from the node's guest attributes pinned.
        [(node_name, address, vm)] = engine.fakes.fleet.history
        state_key = engine.resource("node-host-key")
        assert state_key is not None
        assert state_key["outputs"]["host_key"] == vm.host_public_key
        sshd = vm.sshd_log.read_text(errors="replace")
        assert "Accepted publickey for tpu-vllm" in sshd
        runs = [i for i in vm.docker.invocations() if i["argv"][1:2] == ["run"]]
        assert len(runs) == 1 and MODEL in runs[0]["argv"]
        ready = engine.resource("vllm-ready")
        assert ready is not None and "TPU_VLLM_READY " in json.dumps(ready["outputs"])
        life.memo.update(node=node_name, address=address)
        # The dynamic providers' progress lines (their stderr) reach the user.
        assert "SSH host key ssh-ed25519 read after" in run.output, run.output[-3000:]
        order = [(kind, name) for kind, op, name in steps(events(log)) if op == "create"]
        done = [name for kind, name in order if kind == "done"]
        assert done.index("tpu-qr") < done.index("node-host-key") < done.index("secrets-fetch")
        assert done.index("secrets-fetch") < done.index("vllm-start") < done.index("vllm-ready")
        assert_no_sentinel(run.output, life, "the output of `pulumi up`")


def test_outputs_meet_the_contract(life: Lifecycle) -> None:
    with life.step("outputs", after="up"):
        engine = life.engine
        hidden = engine.outputs()
        shown = engine.outputs(show_secrets=True)
        life.memo["secret_outputs"] = {k: shown[k] for k in ("api_key", "ssh_private_key")}
        assert set(hidden) == set(shown)
        # The contract the mock-level tests check, for the config this stack really has.
        secret = {name for name, value in hidden.items() if value == "[secret]"}
        found = problems(shown, config=engine.stack_config(), secret=secret)
        assert not found, "; ".join(found)
        for name, value in shown.items():
            assert name in secret or hidden[name] == value, name
        address = life.memo["address"]
        assert shown["external_ip"] == address
        assert shown["endpoint"] == f"http://{address}:8000"
        assert shown["openai_base_url"] == f"http://{address}:8000/v1"
        assert shown["model"] == MODEL and shown["chip"] == "v5litepod-1"
        assert shown["node"] == life.memo["node"]
        assert shown["ssh_private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert shown["api_key_secret"].endswith(f"/secrets/{API_KEY_SECRET}")
        assert shown["startup_seconds"] > 0 and shown["hbm"]
        # The tag was resolved once, to the digest the registry served (crane reads it too).
        nightly = engine.fakes.registry.digest("vllm/vllm-tpu", "nightly")
        assert shown["image"] == f"vllm/vllm-tpu@{nightly}"
        # The endpoint answers a consumer with the key, from outside the node.
        request = urllib.request.Request(  # noqa: S310 - http on loopback
            f"{shown['openai_base_url']}/models",
            headers={"Authorization": f"Bearer {shown['api_key']}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            assert MODEL in answer.read().decode()
        # And the README's own check of it, which reads the outputs through the CLI.
        smoke = engine.python("-m", "scripts.smoke_test", STACK).check()
        assert "FAIL" not in smoke.stdout
        assert_no_sentinel(smoke.output, life, "the smoke test's output")


def test_an_upgrade_previews_the_old_and_new_digest_and_a_successor(life: Lifecycle) -> None:
    """docs/operations.md "Upgrade the image": the tag moved; only a new `vllm.imageUpgrade`
    resolves it again, and its preview shows both digests and a create-first new node."""
    with life.step("upgrade-preview", after="outputs"):
        engine = life.engine
        pinned = engine.outputs()["image"]
        newer = engine.fakes.registry.push("vllm/vllm-tpu", "nightly", "a newer nightly")
        assert newer not in pinned
        same = engine.pulumi("preview", "--diff").check().output
        assert newer not in same, same[-3000:]  # the tag moved; the pin did not
        # The documented step (docs/operations.md "Upgrade the image"), previewed only.
        engine.config_set("tpu-vllm:vllm.imageUpgrade", "2026-12-03", "--path")
        run = engine.pulumi("preview", "--diff").check()
        out = run.output
        assert pinned.split("@")[1] in out and newer in out, out[-3000:]
        # The TPU is replaced, create-first: its provider's diff says so, the plan counts it.
        assert "the image changes (" in out and "a successor node starts with it" in out, out
        assert re.search(r"\+-\s*\d+ to replace", out), out[-3000:]
        engine.pulumi("config", "rm", "--path", "tpu-vllm:vllm.imageUpgrade").check()
        # Nothing was requested, and without the label the pin holds.
        assert len(engine.fakes.tpu.requests_for("queuedResources.create")) == 1
        again = engine.pulumi("preview", "--diff").check().output
        assert newer not in again


def test_the_state_holds_no_secret_in_plain_text(life: Lifecycle) -> None:
    with life.step("state", after="outputs"):
        engine = life.engine
        files = engine.state_files()
        checkpoints = [f for f in files if f.suffix == ".json" and "/stacks/" in str(f)]
        assert checkpoints, files
        for path in files:
            assert_no_sentinel(path.read_text(errors="replace"), life, str(path))
        # The secrets are there, encrypted: the resources that hold them mark them secret.
        exported = json.dumps(engine.export())
        assert "4dabf18193072939515e22adb298388d" in exported  # Pulumi's secret signature
        # No command's stdout holds a secret, and the fetch printed none of them.
        for name in ("secrets-fetch", "vllm-start", "vllm-ready"):
            command = engine.resource(name)
            assert command is not None
            for stream in ("stdout", "stderr"):
                assert_no_sentinel(json.dumps(command["outputs"].get(stream)), life, name)
        # The API key the node reads is the stack's: the stand-in wrote it to Secret Manager.
        stored = engine.fakes.secret_manager.payload(PROJECT, API_KEY_SECRET)
        assert stored.decode() == life.memo["secret_outputs"]["api_key"]


def test_a_second_up_reports_no_changes(life: Lifecycle) -> None:
    with life.step("no-changes", after="state"):
        engine = life.engine
        log = engine.work / "second-up.events.jsonl"
        run = engine.up("--expect-no-changes", events=log).check()
        ops = {op for _, op, _ in steps(events(log))}
        assert ops <= {"same"}, (ops, run.output[-3000:])
        assert len(engine.fakes.tpu.requests_for("queuedResources.create")) == 1
        [(_, _, vm)] = engine.fakes.fleet.history
        runs = [i for i in vm.docker.invocations() if i["argv"][1:2] == ["run"]]
        assert len(runs) == 1, "the second up restarted the server"


def test_a_consumer_reads_the_outputs_through_a_stack_reference(life: Lifecycle) -> None:
    with life.step("consumer", after="no-changes"):
        engine = life.engine
        consumer = engine.work / "consumer"
        source = Path(__file__).resolve().parents[2] / "examples" / "consumer"
        shutil.copytree(source, consumer, ignore=shutil.ignore_patterns("__pycache__"))
        (consumer / ".venv").symlink_to(engine.project / ".venv")
        stack = ["-s", "dev"]
        run = engine.run
        cli = [engine.pulumi_path, "--cwd", str(consumer)]
        run([*cli, "stack", "select", "--create", "dev"]).check()
        run(
            [*cli, "config", "set", "serverStack", f"organization/tpu-vllm/{STACK}", *stack]
        ).check()
        up = run([*cli, "up", "--yes", "--skip-preview", *stack]).check()
        assert_no_sentinel(up.output, life, "the consumer's up")
        read = json.loads(run([*cli, "stack", "output", "--json", "--show-secrets", *stack])
                          .check().stdout)  # fmt: skip
        server = engine.outputs(show_secrets=True)
        assert read["llm_base_url"] == server["openai_base_url"]
        assert read["llm_model"] == MODEL
        assert read["llm_api_key"] == server["api_key"]
        assert read["llm_budget"].startswith(f"ends {server['expires_at']}")
        hidden = json.loads(run([*cli, "stack", "output", "--json", *stack]).check().stdout)
        assert hidden["llm_api_key"] == "[secret]"


def test_the_runs_end_shows_in_a_refresh(life: Lifecycle) -> None:
    with life.step("expiry", after="consumer"):
        engine = life.engine
        address = life.memo["address"]
        qr = engine.resource("tpu-qr")
        assert qr is not None
        pin = engine.resource("vllm-image")
        assert pin is not None
        engine.fakes.tpu.expire(str(qr["id"]))
        deadline = time.monotonic() + 30
        while address in engine.fakes.fleet.running and time.monotonic() < deadline:
            time.sleep(0.1)
        assert address not in engine.fakes.fleet.running, "the VM outlived its run"
        run = engine.pulumi("refresh", "--yes").check()
        refreshed = engine.resource("tpu-qr")
        assert refreshed is not None
        outputs: dict[str, Any] = refreshed["outputs"]
        assert outputs.get("state") == "SUSPENDED", outputs
        assert not outputs.get("external_ip"), outputs
        assert "tpu-qr" in run.output
        # A refresh reads the pin back as it is: the digest never moves with the tag.
        kept = engine.resource("vllm-image")
        assert kept is not None and kept["outputs"]["image"] == pin["outputs"]["image"]


def test_destroy_leaves_nothing_in_the_fakes(life: Lifecycle) -> None:
    with life.step("destroy", after="expiry"):
        engine = life.engine
        engine.pulumi("destroy", "--yes").check()
        fakes = engine.fakes
        listed = fakes.tpu.discovery_client().projects().locations().queuedResources()
        answer = listed.list(parent=f"projects/{PROJECT}/locations/us-west4-a").execute()
        assert answer.get("queuedResources", []) == []
        fakes.fleet.wait_settled()
        assert fakes.fleet.running == []
        assert not fakes.secret_manager.has_secret(PROJECT, API_KEY_SECRET)
        # The HF token is the user's, stored once by save_hf_token.py: it stays, unchanged.
        assert fakes.secret_manager.payloads(PROJECT, "hf-token") == [HF_TOKEN.encode()]
        assert engine.resources() == [] or all(
            r["type"] in ("pulumi:pulumi:Stack", "pulumi:providers:pulumi-python")
            for r in engine.resources()
        )
        leftovers = {
            path.name: json.loads(path.read_text())
            for path in fakes.standin_state.glob("*.json")
            if json.loads(path.read_text())
        }
        assert leftovers == {}, leftovers
