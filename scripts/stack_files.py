"""The committed stack files (`Pulumi.<stack>.yaml`): which stacks exist, and what they say.

A stack is taken by name, as `pulumi -s` does, or by its file's path, as tab completion gives
it; a name that matches nothing lists the stacks that exist. Values the file holds are read
here without the Pulumi CLI.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from components.config import NAMESPACE

ROOT = Path(__file__).resolve().parent.parent
_STACK_FILE = re.compile(r"^Pulumi\.(?P<stack>[^/]+)\.ya?ml$")


class StackFileError(Exception):
    """The message says why."""


def existing_stacks(root: Path = ROOT) -> list[str]:
    found = (_STACK_FILE.match(p.name) for p in root.glob("Pulumi.*.y*ml"))
    return sorted(m.group("stack") for m in found if m)


def resolve_stack(arg: str, root: Path = ROOT) -> str:
    """`v5e1`, or `Pulumi.v5e1.yaml` in the project root."""
    text = arg.strip()
    match = _STACK_FILE.match(Path(text).name)
    if match and (Path(text).name == text or Path(text).resolve().parent == root.resolve()):
        stack = match.group("stack")
    elif match:
        raise StackFileError(
            f"{text} is not in the project root {root}; the program reads its stack files "
            f"there. Stacks: {_listing(root)}."
        )
    else:
        stack = text
    if not (root / f"Pulumi.{stack}.yaml").is_file():
        close = difflib.get_close_matches(stack, existing_stacks(root), n=1)
        hint = f" Did you mean `{close[0]}`?" if close else ""
        raise StackFileError(
            f"no stack {stack!r}: there is no Pulumi.{stack}.yaml in {root}.{hint} "
            f"Stacks: {_listing(root)}."
        )
    return stack


def _listing(root: Path) -> str:
    return ", ".join(existing_stacks(root)) or "none (create one with `pulumi stack init`)"


def read_config(path: Path) -> Mapping[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise StackFileError(f"cannot read {path}: {' '.join(str(error).split())}.") from None
    config = document.get("config") if isinstance(document, dict) else None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise StackFileError(f"{path}: `config:` is not a map.")
    return config


def section(config: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any]:
    value = config.get(f"{NAMESPACE}:{name}")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StackFileError(f"{path}: `{NAMESPACE}:{name}` must be a map.")
    return value


def model_id(config: Mapping[str, Any], path: Path) -> str:
    value = section(config, "model", path).get("id")
    return value.strip() if isinstance(value, str) else ""
