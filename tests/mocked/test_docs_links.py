"""The documentation holds together: a short README, one page per topic in docs/, and every
relative link in them resolving to a file that exists and, with `#anchor`, to a heading in it.

Anchors follow GitHub's heading ids as github-slugger makes them (Flet/github-slugger
`index.js`, and `script/generate-regex.mjs` for the characters it drops): the heading's text,
lowercased, with punctuation and symbols dropped except `-` and `_` (letters, digits and spaces
stay), each space turned into `-`; a repeated heading gets `-1`, `-2`, ...
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.config import KEYS
from tests.support.docs import DOCS, ROOT, doc_pages, headings, read_doc, section

#: The README's budget: a platform engineer reads it top to bottom.
README_MAX_LINES = 300

#: One page per topic, each linkable in a review.
TOPIC_PAGES = (
    "configuration",
    "outputs",
    "secrets-and-access",
    "tpu-request",
    "compile-cache",
    "gke",
    "renewal",
    "operations",
    "testing",
)

_LINK = re.compile(r"(?<!\\)!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(title: str) -> str:
    """GitHub's id for a heading whose source text is `title`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags are not text
    text = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading id of a page, repeated headings numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, title, _ in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def prose(text: str) -> str:
    """The text with fenced code blocks and inline code spans blanked: a `[x](y)` inside code
    is not a link."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"(`+)(?:(?!\1).)+?\1", "``", line))
    return "\n".join(out)


def links(text: str) -> Iterator[str]:
    body = prose(text)
    yield from _LINK.findall(body)
    yield from _REFERENCE.findall(body)


def broken_links(page: Path) -> list[str]:
    """Each relative link of `page` that names no file, or an anchor its target lacks."""
    problems: list[str] = []
    text = page.read_text()
    for target in links(text):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # another site: not checked offline
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{page.name}: {target}: no file {resolved}")
            continue
        if anchor:
            if resolved.is_dir() or resolved.suffix != ".md":
                problems.append(f"{page.name}: {target}: an anchor into a non-Markdown target")
            elif anchor not in anchors(resolved.read_text()):
                problems.append(f"{page.name}: {target}: no heading #{anchor} in {resolved.name}")
    return problems


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    """The check itself can fail: a missing page, a missing heading in another page or in the
    same one are each reported; working links, external ones and code are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Costs and waits, explained\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n## Outputs: the contract\n\n"
        "[ok](docs/other.md#costs-and-waits-explained) [ok](#outputs-the-contract) "
        "[web](https://example.com/x#y) `[code](nowhere.md)`\n\n"
        "```\n[fenced](nowhere.md)\n```\n\n"
        "[gone](docs/gone.md) [bad](docs/other.md#costs-and-waits) [self](#top-1)\n\n"
        "[ref]: docs/missing.md\n"
    )
    problems = broken_links(page)
    assert len(problems) == 4, problems
    assert any("docs/gone.md" in p for p in problems)
    assert any("#costs-and-waits in other.md" in p for p in problems)
    assert any("#top-1 in README.md" in p for p in problems)
    assert any("docs/missing.md" in p for p in problems)


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Outputs: the contract other services read", "outputs-the-contract-other-services-read"),
        ("What keeps billing after `pulumi destroy`", "what-keeps-billing-after-pulumi-destroy"),
        ("On GKE (`v6e4-gke`) nothing is renewed", "on-gke-v6e4-gke-nothing-is-renewed"),
        (
            "Why a copy on local disk, not a `gs://` cache directory",
            "why-a-copy-on-local-disk-not-a-gs-cache-directory",
        ),
        ("`renewal_lead_seconds` and `expires_at`", "renewal_lead_seconds-and-expires_at"),
        ("Is a start warm?", "is-a-start-warm"),
        ("See [Renewal](renewal.md)", "see-renewal"),
    ],
)
def test_slug_follows_github(title: str, expected: str) -> None:
    assert slug(title) == expected


def test_repeated_headings_are_numbered() -> None:
    assert anchors("## Setup\n\n## Setup\n\n## Setup\n") == {"setup", "setup-1", "setup-2"}


def test_readme_is_short_and_points_to_every_page() -> None:
    """A reader finds every page from the README's last section."""
    text = read_doc("README")
    assert len(text.splitlines()) <= README_MAX_LINES
    where = section(text, "Where everything else lives")
    targets = {t.partition("#")[0] for t in links(where)}
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages <= targets, sorted(pages - targets)
    for name in TOPIC_PAGES:
        assert f"docs/{name}.md" in targets, name


def test_configuration_reference_names_every_key() -> None:
    """Every key the program accepts has a row (key, default, meaning) in the reference."""
    documented: dict[str, tuple[str, str]] = {}
    for line in read_doc("configuration").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]  # `\|` is text
        if len(cells) >= 3 and re.fullmatch(r"`[\w.:]+`", cells[0]):
            documented.setdefault(cells[0].strip("`"), (cells[1], cells[2]))
    expected = {f"{s}.{k}" for s, keys in KEYS.items() for k in keys} | {"backend", "gcp:project"}
    missing = sorted(expected - set(documented))
    assert not missing, f"docs/configuration.md has no row for {missing}"
    for key in expected:
        default, meaning = documented[key]
        assert default and meaning, key


#: A path to one of the suite's test files, as docstrings, comments and notes cite them.
_TEST_FILE = re.compile(r"\btests/(?:[a-z_]+/)*test_[a-z0-9_]+\.py\b")


def cited_test_files(text: str) -> set[str]:
    return set(_TEST_FILE.findall(text))


def _citing_files() -> Iterator[Path]:
    for pattern in ("*.md", "docs/*.md", "components/**/*.py", "scripts/**/*.py",
                    "scripts/**/*.sh", "tests/**/*.py", "tests/support/fixtures/**/*.md",
                    "benchmarks/*.py"):  # fmt: skip
        yield from ROOT.glob(pattern)


def test_every_cited_test_file_exists() -> None:
    """A docstring or note that names a test file sends its reader to where a claim is
    checked; one that names a file the suite no longer has (as tests/test_monitoring_bodies.py and
    tests/test_vllm_metrics.py once did) sends them nowhere."""
    missing = {
        f"{path.relative_to(ROOT)}: {cited}"
        for path in _citing_files()
        # Its own examples below, and the tree test_tests_layout.py plants: no citations.
        if path not in (Path(__file__), ROOT / "tests" / "mocked" / "test_tests_layout.py")
        for cited in cited_test_files(path.read_text(encoding="utf-8"))
        if not (ROOT / cited).is_file()
    }
    assert missing == set()
    assert cited_test_files("see (tests/test_gone.py) and tests/support/fakes/test_x.py.") == {
        "tests/test_gone.py", "tests/support/fakes/test_x.py"
    }  # fmt: skip
