"""scripts/bench.py: the report from result files, the remote command, and the whole path.

The result files are reconstructions of `vllm bench serve --save-result` output
(tests/support/fixtures/vllm_bench/README.md). The Pulumi CLI, `ssh`, `sudo`, `docker` and `vllm`
are small fakes written by the tests onto PATH, so the real code path runs (pulumi stack output,
the private key file, pinned known_hosts, the rendered script under `bash -s`, the API key read
inside the "container") without a network, a VM or a container engine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import bench

ROOT = Path(__file__).resolve().parents[2]
MODULE = "scripts.bench"
FIXTURES = ROOT / "tests" / "support" / "fixtures" / "vllm_bench"
API_KEY = "SENTINEL-API-KEY-7f3c9a"
PRIVATE_KEY = "\n".join(
    [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "SENTINEL-PRIVATE-KEY-b81e",
        "-----END OPENSSH PRIVATE KEY-----",
    ]
)
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISENTINELHOSTKEY"
OUTPUTS: dict[str, Any] = {
    "endpoint": "http://127.0.0.1:8000",
    "model": "google/gemma-4-E2B-it",
    "api_key": API_KEY,
    "external_ip": "127.0.0.1",
    "ssh_private_key": PRIVATE_KEY,
    "ssh_host_key": HOST_KEY,
    "hourly_cost_usd": 0.602,
    "chip": "v5litepod-1",
}
GRID = [(c, n) for n in (128, 1024) for c in (1, 4, 16, 64)]
# The pattern .ci's before-stop hook greps for: a secret expanded onto a command line.
LEAK = re.compile(r'--api-key[= ]+"?\$\{?[A-Za-z_]|--api-key +\$|-e +HF_TOKEN=|HF_TOKEN="?\$\(')


def run_bench(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = bench.main(args)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table_rows(markdown: str) -> dict[tuple[int, int], list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit():
            rows[(int(cells[0]), int(cells[1]))] = cells
    return rows


# --- the report ------------------------------------------------------------------------------


def test_report_has_every_row_and_the_cost_per_million(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_bench(
        ["v5e1", "--from-results", str(FIXTURES), "--hourly-cost", "1.2", "--out", str(tmp_path)],
        capsys,
    )
    assert code == 0
    markdown = (tmp_path / "bench.md").read_text()
    assert markdown.strip() == out.strip()
    rows = table_rows(markdown)
    assert sorted(rows) == sorted(GRID)
    # By hand: c64-in128.json has output_throughput 1496.31 tok/s;
    # 1.2 $/h / (1496.31 tok/s x 3600 s/h) x 1e6 = 1.2e6 / 5,386,716 = 0.22277 -> $0.223.
    assert rows[(64, 128)] == [
        "64", "128", "1,496.3", "214.73", "176.08", "41.94", "42.10", "5.84", "$0.223",
    ]  # fmt: skip
    # c1-in128.json: 122.9686 tok/s -> 1.2e6 / (122.9686 x 3600) = 2.7107 -> $2.711.
    assert rows[(1, 128)][2] == "123.0"
    assert rows[(1, 128)][-1] == "$2.711"
    for cells in rows.values():
        expected = 1.2 / (float(cells[2].replace(",", "")) * 3600) * 1e6
        assert float(cells[-1].lstrip("$")) == pytest.approx(expected, rel=2e-3)


def test_report_sets_seed_000_headline_beside_the_measurement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run_bench(
        ["v5e1", "--from-results", str(FIXTURES), "--hourly-cost", "0.58", "--out", str(tmp_path)],
        capsys,
    )
    assert code == 0
    markdown = (tmp_path / "bench.md").read_text()
    assert "## Against the reference: measured on v5e-1, google/gemma-4-E2B-it" in markdown
    assert "| aggregate output tok/s (best) | 1,496 | 1,496.3 (concurrency 64, input 128) |" in (
        markdown
    )
    assert (
        "| single-stream ms per token | 8.02 | ITL 8.02 / TPOT 8.04 (concurrency 1, input 128) |"
        in markdown
    )
    # 0.58 / (1496.31 x 3600) x 1e6 = 0.1077: the seed's "$0.107" is the same figure, truncated.
    assert "| $ per million output tokens | $0.107 at $0.58/h | $0.108 at $0.58/h |" in markdown
    assert "`google/gemma-4-E2B-it`" in markdown  # the model named by the result files


def test_chart_is_a_real_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_bench(
        ["v5e1", "--from-results", str(FIXTURES), "--hourly-cost", "0.58", "--out", str(tmp_path)],
        capsys,
    )
    assert code == 0
    png = (tmp_path / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1500, 460)  # three panels side by side
    assert len(png) > 40_000  # lines, markers, labels: not an empty canvas
    assert png.endswith(b"IEND\xaeB`\x82")


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    target = tmp_path / "results"
    shutil.copytree(FIXTURES, target)
    return target


def test_missing_result_file_is_named(
    results_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (results_copy / "c16-in1024.json").unlink()
    code, out, err = run_bench(
        ["v5e1", "--from-results", str(results_copy), "--hourly-cost", "0.58"], capsys
    )
    assert code == 2
    assert out == ""
    assert "error:" in err
    assert "no result for concurrency 16 / input 1024" in err
    assert not (results_copy / "bench.md").exists()


def test_corrupt_result_file_is_named(
    results_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = results_copy / "c4-in128.json"
    path.write_text(path.read_text()[:200])  # an interrupted copy
    code, _, err = run_bench(
        ["v5e1", "--from-results", str(results_copy), "--hourly-cost", "0.58"], capsys
    )
    assert code == 2
    assert f"{path}: not valid JSON" in err
    assert "Traceback" not in err


def test_result_without_vllm_fields_is_refused(
    results_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = results_copy / "c1-in128.json"
    data = json.loads(path.read_text())
    del data["output_throughput"], data["mean_itl_ms"]
    path.write_text(json.dumps(data))
    code, _, err = run_bench(
        ["v5e1", "--from-results", str(results_copy), "--hourly-cost", "0.58"], capsys
    )
    assert code == 2
    assert "not a `vllm bench serve --save-result` file" in err
    assert "missing output_throughput, mean_itl_ms" in err


def test_input_length_falls_back_to_the_mean_prompt_length() -> None:
    data = json.loads((FIXTURES / "c16-in1024.json").read_text())
    del data["random_input_len"], data["random_output_len"]  # a run without our --metadata
    result = bench.parse_result(data, "x.json")
    assert (result.concurrency, result.input_len, result.output_len) == (16, 1024, None)


# --- the remote command ----------------------------------------------------------------------


def docker_lines(script: str) -> list[str]:
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("sudo docker run"))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    return [line.removesuffix("\\").strip() for line in lines[start : end + 1]]


def test_remote_command_one_flag_per_line_quoted_inside_the_image() -> None:
    outputs = bench.StackOutputs.from_json(OUTPUTS)
    model = "org/odd model's name"  # a value the shell would split or choke on unquoted
    server = bench.Server(image="registry.example/vllm-tpu:nightly 2", port=8123)
    spec = bench.RunSpec(concurrency=16, input_len=1024, output_len=256, num_prompts=160)
    script = bench.render_remote(spec, model, server)

    assert script.startswith("set -euo pipefail\n")
    assert not re.search(r"@[A-Z_]+@", script)  # every template marker filled
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)

    lines = docker_lines(script)
    assert lines[0] == "sudo docker run"
    for line in lines[1:]:
        words = shlex.split(line.replace("</dev/null >&2", ""))
        assert len([w for w in words if w.startswith("--")]) <= 1, line
    argv = shlex.split(" ".join(lines).replace("</dev/null >&2", ""))
    # Inside the serving image: the entrypoint is a shell that execs vLLM's own benchmark.
    image_at = argv.index(server.image)
    assert argv[image_at - 2 : image_at] == ["--entrypoint", "/bin/sh"]
    assert argv[image_at + 1] == "-c"
    assert argv[image_at + 2].endswith('exec vllm bench serve "$@"')
    assert "--rm" in argv and "--net=host" in argv
    flags = argv[image_at + 4 :]
    expected = {
        "--backend": "openai-chat",
        "--endpoint": "/v1/chat/completions",
        "--base-url": "http://127.0.0.1:8123",
        "--model": model,
        "--dataset-name": "random",
        "--random-input-len": "1024",
        "--random-output-len": "256",
        "--num-prompts": "160",
        "--max-concurrency": "16",
        "--result-dir": "/results",
        "--result-filename": "c16-in1024.json",
    }
    for flag, value in expected.items():
        assert flags[flags.index(flag) + 1] == value
    assert {"--ignore-eos", "--save-result", "--disable-tqdm"} <= set(flags)
    meta = flags.index("--metadata")
    assert flags[meta + 1 : meta + 3] == ["random_input_len=1024", "random_output_len=256"]
    assert f"--model {shlex.quote(model)}" in lines  # quoted by shlex.quote, on its own line

    # The API key: only a file mount and a read inside the container; never a value.
    assert "-v ~/.tpu-vllm/secrets/vllm_api_key:/run/secrets/vllm_api_key:ro" in lines
    assert "$(cat /run/secrets/vllm_api_key)" in argv[image_at + 2]
    for secret in (API_KEY, "SENTINEL-PRIVATE-KEY", "SENTINEL-API"):
        assert secret not in script
    assert "--api-key" not in script
    assert not LEAK.search(script)
    assert outputs.model == "google/gemma-4-E2B-it"


def test_image_and_port_come_from_the_stack_file(tmp_path: Path) -> None:
    assert bench.read_server("v5e1") == bench.Server("vllm/vllm-tpu:nightly", 8000)
    stack_file = tmp_path / "Pulumi.x.yaml"
    stack_file.write_text("config:\n  tpu-vllm:vllm:\n    image: my/image:1\n    port: 9001\n")
    assert bench.read_server("x", stack_file) == bench.Server("my/image:1", 9001)
    stack_file.write_text("config:\n  tpu-vllm:vllm:\n    port: http\n")
    with pytest.raises(bench.Failure, match="must be a port number"):
        bench.read_server("x", stack_file)
    stack_file.write_text("config:\n  tpu-vllm:vllm:\n    port:\n")  # YAML null
    with pytest.raises(bench.Failure, match=r"must be a port number, not null$"):
        bench.read_server("x", stack_file)
    stack_file.write_text("config:\n  gcp:project: p\n")  # no vllm section: the defaults
    assert bench.read_server("x", stack_file) == bench.Server("vllm/vllm-tpu:nightly", 8000)


# --- pulumi stack output, and the whole path over a fake ssh ---------------------------------

FAKE_PULUMI = """\
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "pulumi", "argv": sys.argv[1:], "cwd": os.getcwd()}) + "\\n")
if os.environ.get("FAKE_PULUMI_FAIL"):
    sys.stderr.write(os.environ["FAKE_PULUMI_FAIL"] + "\\n")
    sys.exit(255)
sys.stdout.write(open(os.environ["FAKE_PULUMI_OUTPUTS"]).read())
"""

# `ssh -i KEY -o ... USER@HOST 'bash -s'`: checks what a real ssh would rely on, then runs the
# script locally with the node's HOME.
FAKE_SSH = """\
import json, os, stat, sys
argv = sys.argv[1:]
options = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
key = argv[argv.index("-i") + 1]
known = next(o.split("=", 1)[1] for o in options if o.startswith("UserKnownHostsFile="))
record = {
    "tool": "ssh", "argv": argv, "options": options, "key_path": key,
    "key_mode": stat.S_IMODE(os.stat(key).st_mode),
    "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode),
    "key": open(key).read(), "known_hosts": open(known).read(),
}
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
env = dict(os.environ, HOME=os.environ["FAKE_NODE_HOME"])
os.chdir(env["HOME"])
os.execvpe("bash", ["bash", "-c", argv[-1]], env)
"""

FAKE_DOCKER = """\
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "docker", "argv": args}) + "\\n")
if args[:2] == ["container", "inspect"]:
    sys.exit(0 if args[2] == "tpu-vllm" else 1)
assert args[0] == "run", args
i, mounts, env, entrypoint = 1, {}, {}, None
while args[i].startswith("-"):
    if args[i] in ("--rm", "--net=host"):
        i += 1
        continue
    value = args[i + 1]
    if args[i] == "-v":
        source, target = value.split(":")[:2]
        assert os.path.exists(source), f"fake docker: mount source {source} does not exist"
        mounts[target] = source
    elif args[i] == "-e":
        env[value.split("=", 1)[0]] = value.split("=", 1)[1]
    elif args[i] == "--entrypoint":
        entrypoint = value
    else:
        sys.exit(f"fake docker: unexpected option {args[i]}")
    i += 2
image, command = args[i], args[i + 1 :]
# No container: map each container path onto its host mount instead.
def host(text):
    for target in sorted(mounts, key=len, reverse=True):
        text = text.replace(target, mounts[target])
    return text
os.execvpe(entrypoint, [entrypoint, *map(host, command)], {**os.environ, **env})
"""

FAKE_VLLM = """\
import json, os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    record = {"tool": "vllm", "argv": args, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY")}
    log.write(json.dumps(record) + "\\n")
assert args[:2] == ["bench", "serve"], args
value = lambda flag: args[args.index(flag) + 1]
if os.environ.get("FAKE_VLLM_FAIL_AT") == value("--max-concurrency"):
    sys.exit("ValueError: Initial test run failed")
name = f"c{value('--max-concurrency')}-in{value('--random-input-len')}.json"
shutil.copy(os.path.join(os.environ["FAKE_FIXTURES"], name),
            os.path.join(value("--result-dir"), value("--result-filename")))
print("============ Serving Benchmark Result ============")
"""


class Fakes:
    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.log = root / "calls.jsonl"
        self.node_home = root / "node-home"
        self.outputs = root / "outputs.json"
        self.bin.mkdir(parents=True)
        for name, body in [
            ("pulumi", FAKE_PULUMI),
            ("ssh", FAKE_SSH),
            ("docker", FAKE_DOCKER),
            ("vllm", FAKE_VLLM),
        ]:
            path = self.bin / name
            path.write_text(f"#!{sys.executable}\n{body}")
            path.chmod(0o755)
        sudo = self.bin / "sudo"
        sudo.write_text('#!/bin/sh\nexec "$@"\n')
        sudo.chmod(0o755)
        secrets = self.node_home / ".tpu-vllm" / "secrets"
        secrets.mkdir(parents=True)
        (secrets / "vllm_api_key").write_text(API_KEY)
        (secrets / "hf_token").write_text("hf_SENTINEL")
        self.set_outputs(OUTPUTS)

    def set_outputs(self, outputs: dict[str, Any]) -> None:
        self.outputs.write_text(json.dumps(outputs))

    def calls(self, tool: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        records = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in records if r["tool"] == tool]


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    fakes = Fakes(tmp_path / "fakes")
    monkeypatch.setenv("PATH", f"{fakes.bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(fakes.log))
    monkeypatch.setenv("FAKE_NODE_HOME", str(fakes.node_home))
    monkeypatch.setenv("FAKE_PULUMI_OUTPUTS", str(fakes.outputs))
    monkeypatch.setenv("FAKE_FIXTURES", str(FIXTURES))
    monkeypatch.delenv("FAKE_PULUMI_FAIL", raising=False)
    yield fakes


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert API_KEY not in text
        assert "SENTINEL-PRIVATE-KEY" not in text


def test_stack_outputs_price_the_report(
    fakes: Fakes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_bench(
        ["v5e1", "--from-results", str(FIXTURES), "--out", str(tmp_path / "r")], capsys
    )
    assert code == 0, err
    (call,) = fakes.calls("pulumi")
    assert call["argv"] == ["stack", "output", "--json", "--show-secrets", "-s", "v5e1"]
    assert Path(call["cwd"]) == ROOT  # where Pulumi.yaml is
    markdown = (tmp_path / "r" / "bench.md").read_text()
    assert "# vLLM benchmark: stack `v5e1` (v5litepod-1, `google/gemma-4-E2B-it`)" in markdown
    # hourly_cost_usd 0.602 (flex-start): 0.602 / (1496.31 x 3600) x 1e6 = 0.11176 -> $0.112.
    assert table_rows(markdown)[(64, 128)][-1] == "$0.112"
    assert "$0.602/h" in markdown
    assert fakes.calls("ssh") == []
    assert_no_secret(out, err, markdown)


def test_dry_run_renders_from_the_stack_and_connects_to_nothing(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_bench(["v5e1", "--dry-run", "--concurrency", "1,64"], capsys)
    assert code == 0, err
    assert out.splitlines().count("set -euo pipefail") == 4  # 2 concurrencies x 2 input lens
    assert "--max-concurrency 64 \\" in out
    assert "--model google/gemma-4-E2B-it \\" in out
    assert "--base-url http://127.0.0.1:8000 \\" in out  # Pulumi.v5e1.yaml
    assert "  vllm/vllm-tpu:nightly \\" in out
    assert fakes.calls("ssh") == [] and fakes.calls("docker") == []
    assert fakes.calls("pulumi") == []  # the model came from Pulumi.v5e1.yaml
    assert_no_secret(out, err)


def test_dry_run_needs_no_pulumi_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi (nor anything else) on PATH
    stack_file = tmp_path / "Pulumi.mine.yaml"
    stack_file.write_text(
        "config:\n  tpu-vllm:model:\n    id: my-org/my-model\n"
        "  tpu-vllm:vllm:\n    image: my/image:2\n    port: 9001\n"
    )
    code, out, err = run_bench(
        ["mine", "--dry-run", "--stack-file", str(stack_file), "--concurrency", "1"], capsys
    )
    assert code == 0, err
    assert "--model my-org/my-model \\" in out
    assert "--base-url http://127.0.0.1:9001 \\" in out
    assert "  my/image:2 \\" in out
    stack_file.write_text("config:\n  gcp:project: p\n")
    code, out, err = run_bench(["mine", "--dry-run", "--stack-file", str(stack_file)], capsys)
    assert code == 2
    assert "has no `tpu-vllm:model.id`" in err
    assert err.strip().startswith("bench: error: ") and err.strip().endswith(".")
    code, out, err = run_bench(["nosuchstack", "--dry-run"], capsys)
    assert code == 2
    assert "no stack file" in err and "Pulumi.nosuchstack.yaml" in err


def test_help_documents_every_option_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, default in [
        ("--concurrency", "(default: 1,4,16,64)"),
        ("--input-lens", "(default: 128,1024)"),
        ("--output-len", "(default: 256)"),
        ("--num-prompts", "(default: 10 x concurrency, at least 20)"),
        ("--out", "(default: bench-results/STACK-"),
        ("--from-results", "(default: run on the node)"),
        ("--hourly-cost", "(default: the hourly_cost_usd output"),
        ("--dry-run", "(default: off)"),
        ("--stack-file", "(default: Pulumi.STACK.yaml in the project root)"),
    ]:
        assert option in text and default in text, option


def test_pulumi_failure_is_reported(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_PULUMI_FAIL", "error: no stack named 'nope' found")
    code, out, err = run_bench(["nope", "--from-results", str(FIXTURES)], capsys)
    assert code == 2
    assert "`pulumi stack output -s nope` failed: error: no stack named 'nope' found" in err
    assert out == ""


def test_refuses_a_node_without_a_pinned_host_key(
    fakes: Fakes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes.set_outputs({**OUTPUTS, "ssh_host_key": None})
    code, _, err = run_bench(["v5e1", "--out", str(tmp_path / "r")], capsys)
    assert code == 2
    assert "no pinned ssh_host_key" in err
    assert fakes.calls("ssh") == []


def test_whole_run_over_ssh_inside_the_image(
    fakes: Fakes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "report"
    code, out, err = run_bench(
        ["v5e1", "--concurrency", "1,64", "--input-lens", "128", "--out", str(out_dir)], capsys
    )
    assert code == 0, err

    ssh_calls = fakes.calls("ssh")
    assert len(ssh_calls) == 2  # one run per (concurrency, input length)
    for call in ssh_calls:
        assert call["argv"][-2:] == ["tpu-vllm@127.0.0.1", "bash -s"]
        assert "StrictHostKeyChecking=yes" in call["options"]
        assert call["key_mode"] == 0o600 and call["dir_mode"] == 0o700
        assert call["key"] == PRIVATE_KEY + "\n"
        assert call["known_hosts"] == f"127.0.0.1 {HOST_KEY}\n"
        assert not Path(call["key_path"]).exists()  # removed afterwards
        assert not Path(call["key_path"]).parent.exists()

    vllm_calls = fakes.calls("vllm")
    assert [c["argv"][c["argv"].index("--max-concurrency") + 1] for c in vllm_calls] == ["1", "64"]
    for call in vllm_calls:
        assert call["OPENAI_API_KEY"] == API_KEY  # read from the mounted file inside
        assert API_KEY not in json.dumps(call["argv"])
    for call in fakes.calls("docker"):
        assert API_KEY not in json.dumps(call["argv"])
        assert "SENTINEL-PRIVATE-KEY" not in json.dumps(call["argv"])

    collected = sorted(p.name for p in (out_dir / "results").iterdir())
    assert collected == ["c1-in128.json", "c64-in128.json"]
    assert json.loads((out_dir / "results" / "c64-in128.json").read_text()) == json.loads(
        (FIXTURES / "c64-in128.json").read_text()
    )
    rows = table_rows((out_dir / "bench.md").read_text())
    assert sorted(rows) == [(1, 128), (64, 128)]
    assert (out_dir / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_no_secret(out, err)


def test_missing_secret_on_the_node_fails_with_its_message(
    fakes: Fakes, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (fakes.node_home / ".tpu-vllm" / "secrets" / "vllm_api_key").write_text("")
    code, _, err = run_bench(["v5e1", "--concurrency", "4", "--out", str(tmp_path / "r")], capfd)
    assert code == 1
    assert "bench-serve: ~/.tpu-vllm/secrets/vllm_api_key is missing" in err  # from the node
    assert "the remote run exited with status 1" in err
    assert fakes.calls("vllm") == []


def test_failed_run_keeps_what_was_collected(
    fakes: Fakes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_VLLM_FAIL_AT", "64")
    out_dir = tmp_path / "r"
    code, _, err = run_bench(
        ["v5e1", "--concurrency", "1,64", "--input-lens", "128", "--out", str(out_dir)], capfd
    )
    assert code == 1
    assert "Initial test run failed" in err  # vLLM's own error, streamed through
    assert f"results so far are in {out_dir / 'results'}" in err
    assert [p.name for p in (out_dir / "results").iterdir()] == ["c1-in128.json"]
    assert not (out_dir / "bench.md").exists()


def test_cli_entry_point(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", MODULE, "v5e1", "--from-results", str(FIXTURES)),
            *("--hourly-cost", "0.58", "--out", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "| 64 | 1024 |" in done.stdout
    assert f"wrote {tmp_path / 'bench.md'}" in done.stderr
