"""The components/ layout's rules (components/__init__.py), read from the source with `ast`.

- components/vm/ never imports components.gke, and components/gke/ never components.vm;
- the shared top (components/*.py) and components/config/ import neither backend package;
- components/config/ imports, from components, only itself and what describes the world
  (catalog, messages, renewal, ssh_dial): no module that registers resources;
- the state aliases (old module paths of the dynamic providers) only re-export, and nothing
  imports them;
- no module of components/ is longer than about 500 lines;
- each package's docstring says its part of the flow, what it may import and what it must not.
Every import counts, a function's lazy one too.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

COMPONENTS = ROOT / "components"
MAX_LINES = 500
#: Old module path -> the class a pickle in existing state names there (tests/test_provider_state).
STATE_ALIASES = {
    "components.queued_resource": "QueuedResourceProvider",
    "components.org_policy": "OrgPolicyGateProvider",
    "components.host_key": "NodeHostKeyProvider",
}
#: What components/config/ may import from components, besides itself.
CONFIG_MAY_IMPORT = {
    "components.catalog",
    "components.image_ref",  # the reference grammar `vllm.image` is checked with
    "components.messages",
    "components.renewal",
    "components.ssh_dial",
}
PACKAGES = ("components", "components.vm", "components.gke", "components.config")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Iterator[Path]:
    yield from sorted(COMPONENTS.rglob("*.py"))


def parse(path: Path) -> ast.Module:
    """`ast.parse` of a file, once more on CPython 3.11.7's spurious "AST constructor recursion
    depth mismatch" SystemError, which another thread's compile at the same moment can cause
    (the AST validator's depth counter is shared; CPython gh-106905). Seen once in a full run."""
    text = path.read_text()
    try:
        return ast.parse(text)
    except SystemError as error:
        if "recursion depth mismatch" not in str(error):
            raise
        return ast.parse(text)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports, as absolute names; `from A import b` counts as both `A`
    and `A.b` (b may be a submodule), relative imports resolved against the package."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def part_of(name: str) -> str:
    """`vm`, `gke`, `config`, `alias` or `shared` for a module of components/."""
    if name in STATE_ALIASES:
        return "alias"
    for part in ("vm", "gke", "config"):
        if name == f"components.{part}" or name.startswith(f"components.{part}."):
            return part
    return "shared"


def reaches(imported: set[str], part: str) -> list[str]:
    return sorted(
        i for i in imported if i == f"components.{part}" or i.startswith(f"components.{part}.")
    )


FORBIDDEN = {"vm": ("gke",), "gke": ("vm",), "shared": ("vm", "gke"), "config": ("vm", "gke")}


@pytest.mark.parametrize("path", list(modules()), ids=module_name)
def test_no_backend_imports_the_other_and_the_shared_top_imports_neither(path: Path) -> None:
    name = module_name(path)
    part = part_of(name)
    imported = imports_of(path)
    for other in FORBIDDEN.get(part, ()):
        assert not reaches(imported, other), (
            f"{name} ({part}) imports {reaches(imported, other)}: {part} must not import "
            f"components.{other}. Move what both need to the shared top of components/."
        )


@pytest.mark.parametrize(
    "path", [p for p in modules() if part_of(module_name(p)) == "config"], ids=module_name
)
def test_config_imports_only_what_describes_the_world(path: Path) -> None:
    ours = {i for i in imports_of(path) if i.startswith("components.")}
    allowed = {i for i in ours if i.startswith("components.config")}
    allowed |= {i for i in ours if any(i == m or i.startswith(f"{m}.") for m in CONFIG_MAY_IMPORT)}
    # `from components import catalog` shows as `components` plus `components.catalog`.
    assert ours - allowed - {"components"} == set()


def test_the_layout_rules_see_a_violation(tmp_path: Path) -> None:
    """The checks above parse what they should: a lazy, a relative and a package-level
    cross-import are all found."""
    vm = tmp_path / "components" / "vm"
    vm.mkdir(parents=True)
    sources = {
        "lazy.py": "def f() -> None:\n    from components.gke import cluster\n",
        "relative.py": "from ..gke.cluster import GkeTpuCluster\n",
        "plain.py": "from components import gke\n",
        "dotted.py": "import components.gke.k8s_manifests\n",
    }
    for file, text in sources.items():
        (vm / file).write_text(text)
        assert reaches(imports_of(vm / file, tmp_path), "gke"), file
    (vm / "fine.py").write_text("from components import catalog\nfrom . import tpu\n")
    assert imports_of(vm / "fine.py", tmp_path) >= {"components.vm.tpu", "components.catalog"}
    assert not reaches(imports_of(vm / "fine.py", tmp_path), "gke")


@pytest.mark.parametrize("name", sorted(STATE_ALIASES))
def test_a_state_alias_only_reexports_its_provider_and_nothing_imports_it(name: str) -> None:
    path = ROOT / f"{name.replace('.', '/')}.py"
    new = name.replace("components.", "components.vm.")
    tree = parse(path)
    code = [n for n in tree.body if not (isinstance(n, ast.Expr) and n is tree.body[0])]
    [imported, exported] = code
    assert isinstance(imported, ast.ImportFrom) and imported.module == new
    assert [a.name for a in imported.names] == [STATE_ALIASES[name]]
    assert isinstance(exported, ast.Assign) and ast.literal_eval(exported.value) == [
        STATE_ALIASES[name]
    ]
    assert getattr(importlib.import_module(name), STATE_ALIASES[name]) is getattr(
        importlib.import_module(new), STATE_ALIASES[name]
    )
    for source in [ROOT / "__main__.py", *ROOT.glob("scripts/**/*.py"), *modules()]:
        if source != path:
            assert not {name} & imports_of(source), f"{source} imports the state alias {name}"


@pytest.mark.parametrize("path", list(modules()), ids=module_name)
def test_no_module_of_components_is_longer_than_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_its_part_what_it_may_import_and_what_it_must_not(package: str) -> None:
    doc = importlib.import_module(package).__doc__ or ""
    assert "flow" in doc
    assert "May import:" in doc
    assert "Must not import:" in doc
