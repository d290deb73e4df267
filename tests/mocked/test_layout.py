"""The components/ layout's rules (docs/architecture.md), read from the source with `ast`.

- components/vm/ never imports components.gke, and components/gke/ never components.vm;
- the shared top (components/*.py) and components/config/ import neither backend package;
- components/config/ imports, from components, only itself and what describes the world
  (catalog, messages, renewal, ssh_dial): no module that registers resources;
- the state aliases (old module paths of the dynamic providers) only re-export, and nothing
  imports them;
- each module of the shared top is used by both backends or by `__main__.py` (directly or
  through other shared modules): one that only one backend uses belongs in that backend;
- no module of components/ (nor `__main__.py`) imports another module's `_private` name;
- the shared top and config import no library only the VM uses (pulumi_command: SSH commands);
- no module of components/ is longer than about 500 lines;
- each package's section of docs/architecture.md says its part of the flow, what it may import
  and what it must not, naming the same modules these tests enforce.
Every import counts, a function's lazy one too.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.docs import read_doc, section
from tests.support.python_imports import ROOT, imported_from, imports_of, module_name, parse

COMPONENTS = ROOT / "components"
MAX_LINES = 500
#: Old module path -> the class a pickle in existing state names there
#: (tests/mocked/test_provider_state).
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


def modules() -> Iterator[Path]:
    yield from sorted(COMPONENTS.rglob("*.py"))


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


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module of components/ and `__main__` -> the modules of components/ it imports."""
    sources = [*sorted((root / "components").rglob("*.py")), root / "__main__.py"]
    return {
        module_name(path, root): {i for i in imports_of(path, root) if i.startswith("components.")}
        for path in sources
    }


def users_of_the_shared_top(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Each module of the shared top (components/*.py, the state aliases aside) -> which of
    `vm`, `gke` and `__main__` import it, directly or through shared or config modules."""
    top = {name for name in graph if name.count(".") == 1 and part_of(name) == "shared"}
    users: dict[str, set[str]] = {name: set() for name in top}
    for start, imported in graph.items():
        user = "__main__" if start == "__main__" else part_of(start)
        if user not in ("vm", "gke", "__main__"):
            continue
        seen: set[str] = set()
        todo = list(imported)
        while todo:
            name = todo.pop()
            if name in seen or name not in graph or part_of(name) not in ("shared", "config"):
                continue
            seen.add(name)
            if name in users:
                users[name].add(user)
            todo.extend(graph[name])
    return users


def misplaced_in_the_shared_top(graph: Mapping[str, set[str]]) -> dict[str, list[str]]:
    return {
        name: sorted(users)
        for name, users in users_of_the_shared_top(graph).items()
        if not ({"vm", "gke"} <= users or "__main__" in users)
    }


def test_the_shared_top_is_used_by_both_backends_or_by_main() -> None:
    misplaced = misplaced_in_the_shared_top(import_graph())
    assert not misplaced, (
        f"used by one backend only (or by none): {misplaced}. A module of components/ that only "
        "one backend imports belongs in that backend's package (and one nobody imports, nowhere)."
    )


#: Libraries only the VM backend uses: its node is reached over SSH, GKE's through Kubernetes.
VM_ONLY_LIBRARIES = ("pulumi_command",)


@pytest.mark.parametrize(
    "path",
    [p for p in modules() if part_of(module_name(p)) in ("shared", "config")],
    ids=module_name,
)
def test_the_shared_top_imports_no_library_only_the_vm_uses(path: Path) -> None:
    found = sorted(i for i in imports_of(path) if i.split(".")[0] in VM_ONLY_LIBRARIES)
    assert not found, (
        f"{module_name(path)} imports {found}: only the VM runs commands over SSH. Build them in "
        "components/vm/ (a child keeps its URN with `parent=` the shared component)."
    )


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path, ours: Iterable[str], root: Path = ROOT) -> list[str]:
    """Each `_private` name `path` takes from another module of `ours`: `from M import _x`,
    or `alias._x` where the alias names a module of `ours` (`import M`, `from P import M as a`).
    """
    ours = set(ours)
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = parse(path)
    bound: dict[str, str] = {}  # a local name -> the module of ours it is
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    bound[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            if base not in ours:
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in ours:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif is_private(alias.name):
                    found.append(f"line {node.lineno}: from {base} import {alias.name}")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain: list[str] = []
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            module = ".".join([bound[value.id], *chain])
            if module in ours and module != name:
                found.append(f"line {node.lineno}: {module}.{node.attr}")
    return found


def sources_and_modules(root: Path = ROOT) -> tuple[list[Path], set[str]]:
    sources = [*sorted((root / "components").rglob("*.py")), root / "__main__.py"]
    return sources, {module_name(p, root) for p in sources} | {"components"}


@pytest.mark.parametrize("path", sources_and_modules()[0], ids=module_name)
def test_no_module_imports_another_modules_private_name(path: Path) -> None:
    found = private_imports(path, sources_and_modules()[1])
    assert not found, (
        f"{path.relative_to(ROOT)} uses private names of other modules: {found}. A name used "
        "across modules is public: drop its leading underscore (definition and every use)."
    )


def test_the_placement_and_private_name_rules_see_a_violation(tmp_path: Path) -> None:
    """A top-level module only the VM uses is misplaced; one both backends, or `__main__.py`
    through a shared module, use is not. Every way of reaching a private name is found."""
    for folder in ("components/vm", "components/gke", "components/config"):
        (tmp_path / folder).mkdir(parents=True)
    files = {
        "__main__.py": "from components import front\n",
        "components/__init__.py": "",
        "components/front.py": "from components import behind\n",
        "components/behind.py": "",
        "components/both.py": "def _hidden() -> None: ...\n",
        "components/vm_only.py": "",
        "components/via_config.py": "",
        "components/config/__init__.py": "from components import via_config\n",
        "components/vm/a.py": (
            "import components.both\nfrom components import both, vm_only\n"
            "from components import both as b\nfrom components.both import _hidden\n"
            "def f() -> None:\n    from .. import both as lazy\n    lazy._hidden()\n"
            "components.both._hidden(); both._hidden(); b._hidden()\n"
            "from components.config import x\n"
        ),
        "components/gke/a.py": (
            "from components.both import hidden as _alias\nimport components.config\n"
        ),
    }
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    graph = import_graph(tmp_path)
    assert misplaced_in_the_shared_top(graph) == {"components.vm_only": ["vm"]}
    users = users_of_the_shared_top(graph)
    assert users["components.behind"] == {"__main__"}
    assert users["components.via_config"] == {"vm", "gke"}
    ours = sources_and_modules(tmp_path)[1]
    found = private_imports(tmp_path / "components/vm/a.py", ours, tmp_path)
    assert len(found) == 5, found
    assert not private_imports(tmp_path / "components/gke/a.py", ours, tmp_path)


@pytest.mark.parametrize("path", list(modules()), ids=module_name)
def test_no_module_of_components_is_longer_than_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it"


def named_modules(text: str, label: str) -> set[str]:
    """The `components...` modules a doc names in its paragraph that starts with `label`."""
    match = re.search(rf"^{label}(.*?)(?:\n\n|\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no paragraph starting {label!r}"
    return set(re.findall(r"`(components(?:\.\w+)+)`", match.group(1)))


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_its_part_what_it_may_import_and_what_it_must_not(package: str) -> None:
    doc = section(read_doc("architecture"), package.replace(".", "/") + "/")
    assert "flow" in doc
    assert "May import:" in doc
    assert "Must not import:" in doc
    part = part_of(package)
    forbidden = {f"components.{other}" for other in FORBIDDEN[part]}
    assert named_modules(doc, "Must not import:") == forbidden
    may = named_modules(doc, "May import:")
    assert not may & forbidden
    assert all(importlib.util.find_spec(name) for name in may), may
    if part == "config":
        assert may == CONFIG_MAY_IMPORT
