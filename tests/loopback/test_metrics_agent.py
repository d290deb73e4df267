"""The VM's metrics agent (components/vm/metrics_agent.py): its config and its node-side script.

The config is what the Ops Agent reads from /etc/google-cloud-ops-agent/config.yaml: its
Prometheus receiver's `config` is a Prometheus configuration, checked here with Prometheus' own
`config.Load` (the agent unmarshals it into that type: ops-agent confgenerator/prometheus.go).
The script runs under bash with stand-ins for the node's tools (curl, sudo, systemctl), which
record what they were asked; the installer stand-in is what `--also-install` leaves behind
(a google-cloud-ops-agent unit).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from components.vm import metrics_agent
from tests.support.promql import prometheus_config_error
from tests.support.pulumi_program import run_program
from tests.support.stack_config import config_for

# The installer stand-in: fails its first $FAIL_INSTALLS runs printing $INSTALL_ERROR (apt's
# words for a mirror caught mid-sync by default), then leaves the agent's units behind.
INSTALLER = r"""#!/bin/bash
echo "installer $*" >> "$STATE/calls"
n=$(cat "$STATE/install-runs" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/install-runs"
if [ "$n" -lt "${FAIL_INSTALLS:-0}" ]; then
  repo=http://packages.cloud.google.com/apt/dists/google-cloud-ops-agent-jammy-2
  echo "E: Failed to fetch $repo/main/binary-amd64/Packages.gz  ${INSTALL_ERROR:-Hash Sum mismatch}"
  exit 100
fi
touch "$STATE/installed"
"""

FAKES = {
    # curl: downloads by copying the stand-in installer (or fails, with FAIL_CURL).
    "curl": """#!/bin/bash
echo "curl $*" >> "$STATE/calls"
[ -n "${FAIL_CURL:-}" ] && { echo "curl: (6) Could not resolve host" >&2; exit 6; }
out=""; while [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done
cp "$STATE/installer.sh" "$out"
""",
    "sudo": """#!/bin/bash
echo "sudo $*" >> "$STATE/calls"
exec "$@"
""",
    # systemctl, as the agent's units behave (ops-agent systemd/): restarting the oneshot
    # google-cloud-ops-agent starts the collector, whose ExecStartPre generates $OTEL from
    # config.yaml; the generator drops the Prometheus receiver when the instance's metadata
    # cannot be read (NO_METADATA; confgenerator/prometheus.go). FAIL_COLLECTOR: the
    # collector does not stay up. FAIL_RESTART: the restart itself fails. The collector comes
    # up asynchronously after the oneshot's restart: ACTIVATING_FOR reads of its state say
    # "activating" first, and `show -p ActiveEnterTimestampMonotonic` moves on only once it is
    # active (systemd's unit property, in microseconds since boot). A stale otel.yaml from
    # before stays until then (RuntimeDirectoryPreserve=yes).
    "systemctl": r"""#!/bin/bash
echo "systemctl $*" >> "$STATE/calls"
entered() { cat "$STATE/entered" 2>/dev/null || echo 1000; }
case "$1" in
  show)
    if [ -e "$STATE/activating" ] && [ "$(cat "$STATE/activating")" -le 0 ]; then
      rm -f "$STATE/activating"; echo $(( $(entered) + 5000000 )) > "$STATE/entered"
    fi
    entered; exit 0 ;;
  list-unit-files)
    [ -e "$STATE/installed" ] && echo "google-cloud-ops-agent.service enabled"; exit 0 ;;
  restart)
    [ -n "${FAIL_RESTART:-}" ] && exit 1
    mkdir -p "$(dirname "$OTEL")"
    echo "receivers:" > "$OTEL"
    if [ -z "${NO_METADATA:-}" ]; then
      echo "  prometheus/tpu_vllm_tpu_vllm:" >> "$OTEL"
      grep -E '^ +-? *job_name:' "$CONFIG" \
        | sed -E 's/^ *-? *//; s/^/        - /' >> "$OTEL"
    fi
    if [ -z "${FAIL_COLLECTOR:-}" ]; then
      echo "${ACTIVATING_FOR:-0}" > "$STATE/activating"
      touch "$STATE/collector-active"
    fi
    exit 0 ;;
  is-active)
    if [ -e "$STATE/activating" ]; then
      left=$(cat "$STATE/activating"); echo $((left - 1)) > "$STATE/activating"; exit 3
    fi
    [ "${@: -1}" = google-cloud-ops-agent-opentelemetry-collector ] \
      && [ -e "$STATE/collector-active" ] ;;
esac
""",
}


def run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    bin_dir, state, etc = tmp_path / "bin", tmp_path / "state", tmp_path / "etc"
    for d in (bin_dir, state):
        d.mkdir(exist_ok=True)
    for name, text in FAKES.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (state / "installer.sh").write_text(INSTALLER)
    otel = tmp_path / "run" / "google-cloud-ops-agent-opentelemetry-collector" / "otel.yaml"
    script = metrics_agent.metrics_agent_script(
        config_for("v5e1"),
        config_dir=str(etc),
        installer_url="https://installer.invalid/x.sh",
        otel_config=str(otel),
        retry_seconds=0,
        collector_wait_seconds=5,
    )
    done = subprocess.run(
        ["bash", "-c", script],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "STATE": str(state),
            "OTEL": str(otel),
            "CONFIG": str(etc / "config.yaml"),
            **env,
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done, state


def test_the_config_scrapes_vllm_only_and_loads_in_prometheus() -> None:
    config = metrics_agent.agent_config(
        config_for("v5e1", {"tpu-vllm:monitoring.scrapeInterval": "15s"})
    )
    receiver = config["metrics"]["receivers"]["tpu_vllm"]
    assert receiver["type"] == "prometheus"
    [scrape] = receiver["config"]["scrape_configs"]
    assert scrape["job_name"] == "tpu-vllm-v5e1"
    assert scrape["scrape_interval"] == "15s" and scrape["metrics_path"] == "/metrics"
    assert scrape["static_configs"] == [{"targets": ["localhost:8000"]}]
    pipelines = config["metrics"]["service"]["pipelines"]
    assert pipelines == {
        "default_pipeline": {"receivers": []},
        "tpu_vllm": {"receivers": ["tpu_vllm"]},
    }
    assert config["logging"]["service"]["pipelines"]["default_pipeline"] == {"receivers": []}
    assert prometheus_config_error(yaml.safe_dump(receiver["config"])) == ""


def test_prometheus_refuses_what_the_agent_would() -> None:
    scrape = {"job_name": "x", "scrape_interval": "5s", "scrape_timeout": "10s"}
    broken = {"scrape_configs": [{**scrape, "static_configs": [{"targets": ["localhost:8000"]}]}]}
    assert "scrape timeout greater than scrape interval" in prometheus_config_error(
        yaml.safe_dump(broken)
    )


def test_the_script_installs_writes_the_config_and_restarts_the_agent(tmp_path: Path) -> None:
    done, state = run_script(tmp_path)
    assert done.returncode == 0, done.stderr
    assert metrics_agent.parse_result(done.stdout) == "ok"
    calls = (state / "calls").read_text()
    # The agent of major version 2, whose configuration this script writes.
    assert "installer --also-install --version=2.*.*" in calls
    assert "systemctl restart google-cloud-ops-agent" in calls
    written = yaml.safe_load((tmp_path / "etc" / "config.yaml").read_text())
    assert written == metrics_agent.agent_config(config_for("v5e1"))
    # A second run on the same node does not install again.
    (state / "calls").unlink()
    again, _ = run_script(tmp_path)
    assert metrics_agent.parse_result(again.stdout) == "ok"
    assert "installer" not in (state / "calls").read_text()


@pytest.mark.parametrize(
    ("env", "why"),
    [({"FAIL_CURL": "1"}, "could not download"), ({"FAIL_RESTART": "1"}, "did not restart")],
)
def test_a_failure_is_a_warning_line_never_a_failed_command(
    tmp_path: Path, env: dict[str, str], why: str
) -> None:
    done, _ = run_script(tmp_path, **env)
    assert done.returncode == 0
    assert (
        metrics_agent.parse_result(done.stdout).startswith(f"failed: {why}") or why in done.stdout
    )


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"FAIL_COLLECTOR": "1"}, "the metrics collector google-cloud-ops-agent-opentelemetry"),
        ({"NO_METADATA": "1"}, "otel.yaml has no scrape job tpu-vllm-v5e1"),
    ],
    ids=["collector-down", "pipeline-dropped"],
)
def test_ok_needs_the_collector_running_with_this_stacks_job(
    tmp_path: Path, env: dict[str, str], missing: str
) -> None:
    """The restarted `google-cloud-ops-agent` is a oneshot: its success proves no scraping.
    The collector unit must be active and its generated config must hold the stack's job."""
    done, _ = run_script(tmp_path, **env)
    assert done.returncode == 0, done.stderr
    outcome = metrics_agent.parse_result(done.stdout)
    assert outcome.startswith("failed: ") and missing in outcome, outcome
    assert "sudo journalctl -u google-cloud-ops-agent-opentelemetry-collector" in outcome


def test_a_transient_install_failure_is_retried_as_googles_own_tests_do(tmp_path: Path) -> None:
    """RunInstallFuncWithRetry (ops-agent integration_test/agents/agents.go) retries an
    install whose error looks transient, such as apt's "Hash Sum mismatch"."""
    done, state = run_script(tmp_path, FAIL_INSTALLS="2")
    assert metrics_agent.parse_result(done.stdout) == "ok", done.stdout + done.stderr
    assert (state / "install-runs").read_text().strip() == "3"
    assert "try 1 of 6 failed" in done.stdout and "try 2 of 6 failed" in done.stdout


@pytest.mark.parametrize(
    ("env", "runs", "why"),
    [
        (
            {"FAIL_INSTALLS": "99"},
            "6",
            "did not install (log: ~/.tpu-vllm/ops-agent-install.log), 6 tries",
        ),
        (
            {"FAIL_INSTALLS": "99", "INSTALL_ERROR": "404  Not Found"},
            "1",
            "did not install (log: ~/.tpu-vllm/ops-agent-install.log)",
        ),
    ],
    ids=["transient-every-time", "permanent"],
)
def test_an_install_that_keeps_failing_is_a_warning_after_the_tries(
    tmp_path: Path, env: dict[str, str], runs: str, why: str
) -> None:
    done, state = run_script(tmp_path, **env)
    assert done.returncode == 0
    assert metrics_agent.parse_result(done.stdout) == f"failed: the Ops Agent {why}"
    assert (state / "install-runs").read_text().strip() == runs


def test_a_failed_agent_warns_at_pulumi_up_and_a_good_one_does_not() -> None:
    def outputs(stdout: str):  # type: ignore[no-untyped-def]
        from tests.support.mock_outputs import cloud_outputs

        def answer(args):  # type: ignore[no-untyped-def]
            result = cloud_outputs(args)
            if args.name == "vllm-metrics-agent":
                result["stdout"] = stdout
            return result

        return answer

    bad = run_program(
        "v5e1", outputs_for=outputs("TPU_VLLM_METRICS_AGENT failed: could not download x\n")
    )
    [warning] = [w for w in bad.warnings if "metrics agent failed: could not download" in w]
    # A plain `pulumi up` re-runs nothing (the command's inputs are unchanged): the fix names
    # the command's own URN for `--replace`.
    urn = "urn:pulumi:v5e1::tpu-vllm::tpu-vllm:index:VllmServer$command:remote:Command::"
    assert f"`pulumi up --replace '{urn}vllm-metrics-agent'`" in warning, warning
    good = run_program("v5e1", outputs_for=outputs("TPU_VLLM_METRICS_AGENT ok\n"))
    assert not any("metrics agent" in w for w in good.warnings)


def test_the_agent_is_a_command_of_its_own_not_part_of_the_start() -> None:
    run = run_program("v5e1")
    [agent] = [r for r in run.of_type("command:remote:Command") if r.name == "vllm-metrics-agent"]
    [start] = [r for r in run.of_type("command:remote:Command") if r.name == "vllm-start"]
    assert "ops-agent" not in str(start.inputs["create"]) and "google-cloud-ops-agent" in str(
        agent.inputs["create"]
    )
    assert os.path.basename(metrics_agent.INSTALLER_URL) == "add-google-cloud-ops-agent-repo.sh"


def test_a_collector_still_activating_after_the_restart_is_waited_for(tmp_path: Path) -> None:
    """`systemctl restart google-cloud-ops-agent` returns when the oneshot is done; the
    collector (PartOf= it) may still be activating. The check waits for it to be active anew
    instead of warning at once."""
    done, state = run_script(tmp_path, ACTIVATING_FOR="3")
    assert metrics_agent.parse_result(done.stdout) == "ok", done.stdout
    calls = (state / "calls").read_text()
    assert calls.count("is-active") >= 4  # three "activating" answers, then "active"
    assert "ActiveEnterTimestampMonotonic" in calls
