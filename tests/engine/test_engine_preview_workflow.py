""".github/workflows/preview.yml's commands, run as written through the real Pulumi CLI, minus
the GitHub parts (tests/support/engine_stack.py).

Each `run:` block of the workflow is taken from the file and run with `bash -eo pipefail` (what
GitHub's default shell for `run` is on Linux runners), with the step's `env:` filled in from
what GitHub would give it: `matrix.stack`, the pull request's base commit, `vars.*` and
`secrets.*` (the file backend here, the passphrase, no Pulumi Cloud token). Left out, and why:
the `uses:` steps (checkout, setup-python, Workload Identity Federation, gcloud, installing the
CLI: the built CLI is on PATH), the two install steps (the project's virtualenv is the one the
tests run in, linked as `.venv`; a `pip install` here would reach PyPI), and pulumi/actions' own
step, which is replaced by the command it runs: its src/run.ts selects the stack in the work dir
and calls the Automation API's `stack.preview` with the step's `diff: true`, that is
`pulumi preview --diff --non-interactive --stack STACK`.

The plan job runs in a git repository of the copied project whose head commit changes one vLLM
flag against its base, so the plan difference it writes to the step summary must show it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.engine_stack import (
    HF_TOKEN,
    PASSPHRASE,
    PROJECT,
    EngineStack,
    Fakes,
    Lifecycle,
    engine_stack,
)

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"
STACK = "v5e1"
#: Steps not run here, each for the reason in the module docstring.
SKIPPED = {"Install", "Install into the project's virtualenv (Pulumi.yaml names .venv)"}


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    with engine_stack(tmp_path_factory.mktemp("engine-preview-wf"), STACK) as engine:
        yield Lifecycle(engine)


def job_steps(job: str) -> list[dict[str, Any]]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps: list[dict[str, Any]] = workflow["jobs"][job]["steps"]
    return steps


def github_env(step: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, str]:
    """The step's `env:`, each `${{ expression }}` replaced by what GitHub would give."""
    env = {}
    for name, raw in (step.get("env") or {}).items():
        text = str(raw)
        for expression in re.findall(r"\$\{\{\s*([^}]+?)\s*\}\}", text):
            assert expression in values, f"{name}: no value for ${{{{ {expression} }}}}"
            text = text.replace(f"${{{{ {expression} }}}}", values[expression])
        env[name] = text
    return env


def run_step(engine: EngineStack[Fakes], step: Mapping[str, Any], values: Mapping[str, str],
             runner_temp: Path, cwd: Path) -> str:  # fmt: skip
    script = str(step["run"])
    assert "${{" not in script, f"{step['name']}: an expression inside run: (template injection)"
    summary = runner_temp / "summary.md"
    run = engine.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env={
            **github_env(step, values),
            "RUNNER_TEMP": str(runner_temp),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_WORKSPACE": str(cwd),
        },
    ).check()
    return run.output


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_the_plan_job_runs_as_written_and_shows_the_changed_flag(life: Lifecycle) -> None:
    with life.step("plan"):
        engine = life.engine
        project = engine.project
        git(project, "init", "-q")
        git(project, "add", "-A")
        git(project, "commit", "-qm", "base")
        base = git(project, "rev-parse", "HEAD")
        stack_file = project / f"Pulumi.{STACK}.yaml"
        stack_file.write_text(
            stack_file.read_text().replace("maxModelLen: 32768", "maxModelLen: 16384")
        )
        git(project, "commit", "-qam", "head: a shorter context")
        temp = engine.work / "runner-temp-plan"
        temp.mkdir()
        values = {"matrix.stack": STACK, "github.event.pull_request.base.sha": base}
        ran = []
        for step in job_steps("plan"):
            if "run" not in step or step["name"] in SKIPPED:
                continue
            run_step(engine, step, values, temp, project)
            ran.append(step["name"])
        assert ran == ["Plan the head commit", "Plan the base commit",
                       "Difference between base and head plans"]  # fmt: skip
        summary = (temp / "summary.md").read_text()
        assert f"Plan difference for `{STACK}`" in summary
        assert re.search(r"^-.*--max-model-len.*32768", summary, re.M), summary
        assert re.search(r"^\+.*--max-model-len.*16384", summary, re.M), summary
        assert HF_TOKEN not in summary and PASSPHRASE not in summary
        assert engine.fakes.tpu.requests == []


def test_the_preview_job_selects_the_stack_and_previews_it(life: Lifecycle) -> None:
    with life.step("preview", after="plan"):
        engine = life.engine
        backend = engine.env["PULUMI_BACKEND_URL"]
        values = {
            "matrix.stack": STACK,
            "vars.GCP_PROJECT": PROJECT,
            "vars.PULUMI_BACKEND_URL": backend,
            "secrets.PULUMI_ACCESS_TOKEN": "",
            "secrets.PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        }
        temp = engine.work / "runner-temp-preview"
        temp.mkdir()
        steps = job_steps("preview")
        [select] = [s for s in steps if s.get("name") == "Select the stack and its project"]
        run_step(engine, select, values, temp, engine.project)
        [action] = [s for s in steps if s.get("name") == "pulumi preview"]
        assert str(action["uses"]).startswith("pulumi/actions@")
        inputs = action["with"]
        assert inputs["command"] == "preview" and inputs["diff"] is True
        assert inputs["stack-name"] == "${{ matrix.stack }}"
        env = github_env(action, values)
        run = engine.run(
            [engine.pulumi_path, "preview", "--diff", "--non-interactive", "--stack", STACK],
            env=env,
        ).check()
        assert re.search(r"\+\s+\d+ to create", run.output), run.output[-2000:]
        assert "tpu-qr" in run.output and "vllm-ready" in run.output
        for secret in (HF_TOKEN, PASSPHRASE):
            assert secret not in run.output
        assert engine.fakes.tpu.requests_for("queuedResources.create") == []
