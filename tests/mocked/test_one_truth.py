"""One truth: each fact the documentation states lives in one place, the
other mentions agree with it or link to it, and, where the code decides the fact, the one place
agrees with the code.

- The Go version: docs/testing.md, "The Go toolchain", states the minimum; it is the newest `go`
  line of the repository's go.mod files, and every Go version written anywhere in the tracked
  text files is that one.
- Where a stack file with the user's values belongs: docs/renewal.md, "Commit the stack file, to
  a private repository" (the renew workflow deploys the file it checks out).
- When the API key changes: docs/secrets-and-access.md, "When the API key changes" (never on a
  renewal: the key's RandomPassword has no keepers).
- Where the seed facts are kept: docs/testing.md, "The seed facts" (one file, seed 000's).
- When the engine tests run and when they skip: docs/testing.md, "CI, and when a layer skips".
- What to set before a stack's first `pulumi up`: the stack files' own header comments.
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.support.docs import ROOT, doc_pages, read_doc, section

# --- The Go version ---------------------------------------------------------------------------

#: The one statement of the minimum, in docs/testing.md's section "The Go toolchain".
GO_HOME = ("testing", "The Go toolchain")
_GO_MINIMUM = re.compile(r"needs \*\*Go (\d+\.\d+\.\d+) or later\*\*")
#: A Go version in prose, comments or messages: "Go X.Y.Z", "Go >= X.Y", "goX.Y.Z" (any case);
#: not `godebug default=goX.Y`, which names a language version's defaults, not a toolchain.
_GO_VERSION = re.compile(
    r"(?<!default=)\bgo(?:\s*>=\s*|\s+|(?=\d))v?(\d+\.\d+(?:\.\d+)?)\b", re.IGNORECASE
)
#: go.mod's own version lines; its comments and `godebug` lines state no requirement.
_GO_DIRECTIVE = re.compile(r"^(go|toolchain)\s+(?:go)?(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)
#: Tracked files that are data, not statements: module hashes and recorded logs and results.
_NOT_STATEMENTS = ("go.sum",)
_DATA_DIRS = ("tests/support/fixtures/",)
#: This file: its examples of each form are there to be found.
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
#: Mentions that cite how Go itself behaves at some release, not what this project needs:
#: (path, a substring of the line) -> why. Kept short on purpose.
CITATIONS = {
    ("tests/support/standins/command_keys.py", "encoding/pem.Decode"): (
        "the stand-in follows the standard library's PEM decoder as written at that release"
    ),
}


@cache
def tracked_text_files() -> tuple[tuple[str, str], ...]:
    """(path, text) of every tracked text file (`git ls-files`), data files left out."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout, so no list of tracked files ({error})")
    found: list[tuple[str, str]] = []
    for path in filter(None, listed.split("\0")):
        if path == SELF or Path(path).name in _NOT_STATEMENTS or path.startswith(_DATA_DIRS):
            continue
        file = ROOT / path
        if not file.is_file():
            continue  # deleted in the work tree, not yet in the index
        raw = file.read_bytes()
        if b"\0" in raw:
            continue
        try:
            found.append((path, raw.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return tuple(found)


def go_minimum() -> str:
    text = section(read_doc(GO_HOME[0]), GO_HOME[1])
    stated = _GO_MINIMUM.findall(text)
    assert len(stated) == 1, f"docs/testing.md, {GO_HOME[1]!r}: one 'needs **Go X.Y.Z or later**'"
    return str(stated[0])


def _key(version: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


def go_mentions(path: str, text: str) -> list[tuple[int, str, str]]:
    """(line number, version, line) of each Go version a non-go.mod file states."""
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if any(path == where and part in line for where, part in CITATIONS):
            continue
        found.extend((number, v, line.strip()) for v in _GO_VERSION.findall(line))
    return found


def test_the_go_minimum_is_the_newest_go_line_of_the_go_mod_files() -> None:
    """Each go.mod's `go` line is that module's own minimum; the suite builds them all, so it
    needs the newest, and the one statement must say exactly that version."""
    minimum = go_minimum()
    lines = {
        (path, kind): version
        for path, text in tracked_text_files()
        if Path(path).name == "go.mod"
        for kind, version in _GO_DIRECTIVE.findall(text)
    }
    go_lines = {path: v for (path, kind), v in lines.items() if kind == "go"}
    assert len(go_lines) >= 5, go_lines  # the engine's, the kube layer's and the tests' modules
    newest = max(go_lines.values(), key=_key)
    assert newest == minimum, f"docs/testing.md says {minimum}; the newest go.mod says {newest}"
    above = {p: v for (p, _), v in lines.items() if _key(v) > _key(minimum)}
    assert not above, f"go.mod lines above the stated minimum {minimum}: {above}"
    toolchains = {p: v for (p, kind), v in lines.items() if kind == "toolchain" and v != minimum}
    assert not toolchains, f"toolchain lines other than {minimum}: {toolchains}"


def test_every_go_version_in_the_repository_is_the_one_minimum() -> None:
    """Tracked files once said "1.26", "1.26.7 or later" and ">= 1.26.6". Every Go version a
    tracked file states, outside go.mod files (tested above) and data, is the minimum that
    docs/testing.md states, written in full."""
    minimum = go_minimum()
    wrong = [
        f"{path}:{number}: Go {version}: {line[:120]}"
        for path, text in tracked_text_files()
        if Path(path).name != "go.mod"
        for number, version, line in go_mentions(path, text)
        if version != minimum
    ]
    assert not wrong, f"Go versions other than {minimum} (docs/testing.md):\n" + "\n".join(wrong)


def test_the_go_version_check_finds_each_form() -> None:
    """The check itself can fail: each form the repository once had is read as a version, a
    citation on its list is not, and a version-like number that is not Go's is not."""
    text = "\n".join(
        [
            "install Go 1.26 (https://go.dev/doc/install)",
            "Go 1.26.7 or later",
            "built with Go >= 1.26.6.",
            "go version go1.26.8 linux/amd64",
            "started 1.5 s ago 1.5 s later; cargo 1.2; godebug default=go1.24",
        ]
    )
    assert [v for _, v, _ in go_mentions("x.md", text)] == ["1.26", "1.26.7", "1.26.6", "1.26.8"]
    cited = "Go's `encoding/pem.Decode` (Go 1.26): the first END line"
    assert go_mentions("tests/support/standins/command_keys.py", cited) == []
    assert [v for _, v, _ in go_mentions("other.py", cited)] == ["1.26"]


# --- Where a stack file with your values belongs -----------------------------------------------

STACK_FILE_HOME = ("renewal", "Commit the stack file, to a private repository")
STACK_FILE_ANCHOR = "renewal.md#commit-the-stack-file-to-a-private-repository"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_renew_workflow_deploys_the_checked_out_stack_file_and_the_docs_say_so() -> None:
    """The workflow checks out the repository (no other ref: a scheduled run gets the default
    branch) and sets only `gcp:project` itself, so the stack file it deploys is the committed
    one: docs/renewal.md says to commit it, to a private repository, in one section."""
    workflow = (ROOT / ".github" / "workflows" / "renew.yml").read_text()
    steps = yaml.safe_load(workflow)["jobs"]["renew"]["steps"]
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert "ref" not in checkout.get("with", {})
    config_sets = re.findall(r"pulumi config set (\S+)", workflow)
    assert config_sets == ["gcp:project"], config_sets
    home = _flat(section(read_doc(STACK_FILE_HOME[0]), STACK_FILE_HOME[1]))
    for words in ("**private** repository", "default branch", "`GCP_PROJECT`", "never to a public"):
        assert words in home, words
    setup = section(read_doc("renewal"), "One-time setup")
    assert f"(#{STACK_FILE_ANCHOR.split('#')[1]})" in setup


def test_no_page_offers_keeping_stack_files_uncommitted() -> None:
    """The README once said "commit them on your own branch or keep them out of pushes to a
    public remote", while docs/renewal.md said the workflow needs them committed."""
    for page in doc_pages():
        flat = _flat(page.read_text())
        assert "keep them out of pushes" not in flat, page.name


def test_the_readme_points_to_the_one_place_for_stack_files() -> None:
    quickstart = section(read_doc("README"), "Quickstart")
    assert f"docs/{STACK_FILE_ANCHOR}" in quickstart


# --- When the API key changes -----------------------------------------------------------------

API_KEY_HOME = ("secrets-and-access", "When the API key changes")
API_KEY_ANCHOR = "secrets-and-access.md#when-the-api-key-changes"
#: A sentence that has a renewal change the key.
_KEY_CHANGES_ON_RENEWAL = re.compile(
    r"\bkey\b[^.]{0,40}\bchang\w*[^.]{0,20}\b(?:after|on|with|at|by) (?:a |each |every )?renew",
    re.IGNORECASE,
)


def _api_key_password() -> ast.Call:
    tree = ast.parse((ROOT / "components" / "secrets.py").read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "RandomPassword"
    ]
    assert len(calls) == 1, "components/secrets.py: one RandomPassword, the API key"
    return calls[0]


def test_the_api_key_does_not_change_on_a_renewal_and_the_one_place_says_so() -> None:
    """The key's RandomPassword takes no keepers and no input from the node, so only its own
    replacement changes it; docs/secrets-and-access.md says so once, and the renewal and
    operations pages link there."""
    password = _api_key_password()
    assert "keepers" not in {k.arg for k in password.keywords}
    assert isinstance(password.args[0], ast.JoinedStr)  # f"{name}-api-key"
    home = _flat(section(read_doc(API_KEY_HOME[0]), API_KEY_HOME[1]))
    assert "does **not** change across renewals" in home
    assert "`secrets-api-key`" in home and "`keepers`" in home
    assert "tests/engine/test_engine_renewal.py" in home
    for page in ("renewal", "operations"):
        assert API_KEY_ANCHOR in read_doc(page), page


def key_changes_on_renewal(text: str) -> list[str]:
    """Each sentence of `text` that has a renewal change the API key."""
    return [m.group(0) for m in _KEY_CHANGES_ON_RENEWAL.finditer(_flat(text).replace("e.g.", "eg"))]


def test_no_page_says_a_renewal_changes_the_api_key() -> None:
    for page in doc_pages():
        found = key_changes_on_renewal(page.read_text())
        assert not found, f"{page.name}: {found}"
    # The check can fail: docs/operations.md's earlier words.
    assert key_changes_on_renewal(
        "A 401 names the likely cause (the key changed, e.g. after a renewal)"
    )


def test_the_smoke_test_does_not_blame_a_renewal_for_a_401() -> None:
    """scripts/smoke_test.py's 401 message must name what is true: the key given is not the
    stack's current `api_key` (a renewal never changes it)."""
    text = _flat((ROOT / "scripts" / "smoke_test.py").read_text())
    assert "the stack was renewed" not in text


# --- Where the seed facts are kept -------------------------------------------------------------

SEED_FACTS = ROOT / "tests" / "support" / "fixtures" / "seed_facts"
_SEED_FACTS_MENTION = re.compile(r"tests/support/fixtures/seed_facts(/?[^\s`'\")]*)")


def test_every_mention_of_the_seed_facts_names_a_file_that_is_there() -> None:
    """Only seed 000's facts are kept there (one file); a page that names the directory as the
    home of "the facts the tests check" says more than is true."""
    kept = sorted(p.name for p in SEED_FACTS.iterdir() if p.is_file())
    assert kept == ["seed_000.json"], kept
    for page in doc_pages():
        for tail in _SEED_FACTS_MENTION.findall(page.read_text()):
            name = tail.lstrip("/")
            assert name in kept, (
                f"{page.name}: tests/support/fixtures/seed_facts{tail} names no file"
            )
    home = _flat(section(read_doc("testing"), "The seed facts"))
    for name in kept:
        assert f"tests/support/fixtures/seed_facts/{name}" in home
    assert "Seed 003 has no such file" in home


# --- When the engine tests run, and when they skip ---------------------------------------------


def test_the_testing_page_says_when_the_engine_tests_run_and_skip() -> None:
    """docs/testing.md once said the renewal was measured through the real engine here, and
    also that those tests skip. They run in every CI run, with the suite's stand-ins for the two
    tools the Go module proxy refuses; each skip reason it quotes is the code's own."""
    home = _flat(section(read_doc("testing"), "CI, and when a layer skips"))
    ci = (ROOT / ".ci" / "run").read_text()
    for variable in ("TPU_VLLM_REQUIRE_ENGINE", "TPU_VLLM_REQUIRE_PRIVILEGED_TESTS"):
        assert f"export {variable}=1" in ci and f"`{variable}=1`" in home, variable
    assert "every CI run runs every engine test" in home
    assert "(#the-two-stand-ins)" in home and "never a reason to skip" in home
    quoted = {
        "the engine is not built": ROOT / "tests" / "support" / "engine.py",
        "fake TPU VMs need root": ROOT / "tests" / "support" / "fakes" / "tpu_vm.py",
    }
    for reason, source in quoted.items():
        assert f'("{reason}' in home and reason in source.read_text(), reason


def test_the_renewal_figures_name_the_tools_they_ran_with() -> None:
    """The figures every run can repeat (the stand-ins') come first; a real language host and
    pulumi-command ran once, compiled outside the project, which no run here can repeat."""
    page = read_doc("testing")
    [paragraph] = [p for p in page.split("\n\n") if "renew.py's `pulumi up --refresh` took" in p]
    flat = _flat(paragraph)
    first_figure = re.search(r"took \d+", flat)
    assert first_figure is not None
    assert "stand-in" in flat[: first_figure.start()], flat[: first_figure.start()]
    if "real language host" in flat:
        assert "outside the project" in flat and "can repeat it" in flat


def test_every_tpu_vllm_variable_the_docs_name_is_read_somewhere() -> None:
    """A documented `TPU_VLLM_*` setting that no code reads (docs/testing.md once named
    `TPU_VLLM_ENGINE_BIN`) sends the reader nowhere."""
    code = "\n".join(text for path, text in tracked_text_files() if not path.endswith(".md"))
    named = {v for page in doc_pages() for v in re.findall(r"\bTPU_VLLM_\w+", page.read_text())}
    unread = sorted(v for v in named if re.search(rf"\b{v}\b", code) is None)
    assert not unread, unread


# --- What to set before a stack's first `pulumi up` --------------------------------------------


def stack_files() -> list[Path]:
    return sorted(p for p in ROOT.glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("path", stack_files(), ids=lambda p: p.name)
def test_each_stack_file_says_what_to_set_before_its_first_up(path: Path) -> None:
    """The header a user reads first names every step before `pulumi up`: the project, who may
    connect (`access.allowedCidrs`, and on the VM backend `access.sshCidrs`, else ~32 min of
    SSH dials on a billing TPU), and the Hugging Face token (`scripts/save_hf_token.py`); and
    where the file, once it holds those values, belongs."""
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    text = path.read_text()
    header = _flat(" ".join(line.lstrip("# ") for line in text.split("\nconfig:")[0].splitlines()))
    assert f"Before the first `pulumi up -s {stack}`" in header
    assert f"pulumi config set gcp:project YOUR_PROJECT -s {stack}" in header
    assert "'tpu-vllm:access.allowedCidrs[0]'" in header
    assert f".venv/bin/python -m scripts.save_hf_token --stack {stack}" in header
    assert "gcloud auth application-default login" in header
    gke = yaml.safe_load(text)["config"].get("tpu-vllm:backend") == "gke"
    if gke:
        assert "no access.sshCidrs" in header
    else:
        assert f"'tpu-vllm:access.sshCidrs[0]' YOUR.OWN.ADDRESS/32 -s {stack}" in header
    assert f'docs/renewal.md, "{STACK_FILE_HOME[1]}"' in header
    section(read_doc(STACK_FILE_HOME[0]), STACK_FILE_HOME[1])  # the section it names exists
