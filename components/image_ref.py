"""An image reference as Docker reads it: `[DOMAIN/]PATH[:TAG][@DIGEST]`.

Our own parser, so `vllm.image` is checked before anything is created and the registry lookup
knows which registry and repository Docker would use. The grammar and the normalisation
(`docker.io`, `library/`) follow github.com/distribution/reference, which Docker and containerd
use: `regexp.go` and `normalize.go`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
DOCKER_HUB_LEGACY = "index.docker.io"
#: Where Docker Hub's registry API answers (moby registry/config.go `DefaultV2Registry`).
DOCKER_HUB_API = "https://registry-1.docker.io"
DEFAULT_TAG = "latest"
#: distribution/reference `RepositoryNameTotalLengthMax`, for the path (not the domain).
NAME_MAX = 255

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_REMOTE_NAME = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
#: A pin is always sha256, the one algorithm every implementation must support (OCI image-spec
#: descriptor.md).
SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
_HEX64 = re.compile(r"[a-f0-9]{64}")

EXAMPLE = "vllm/vllm-tpu:nightly, or vllm/vllm-tpu@sha256:<64 hex digits> to pin one build"


class ImageRefError(ValueError):
    """Why a string is not an image reference; the message is the problem, without the key."""


@dataclass(frozen=True)
class ImageRef:
    """One parsed reference. `name` is the repository as written (`vllm/vllm-tpu`), which is what
    nodes are told to pull; `domain` and `path` are where the registry API finds it."""

    name: str
    domain: str
    path: str
    tag: str | None
    digest: str | None

    @property
    def api_base(self) -> str:
        return DOCKER_HUB_API if self.domain == DOCKER_HUB else f"https://{self.domain}"

    @property
    def lookup(self) -> str:
        return self.tag or DEFAULT_TAG

    def pinned(self, digest: str) -> str:
        """`NAME@sha256:...`: the tag dropped, so what runs can only be these bytes."""
        return f"{self.name}@{digest}"

    def __str__(self) -> str:
        text = self.name + (f":{self.tag}" if self.tag else "")
        return text + (f"@{self.digest}" if self.digest else "")


def parse(text: str) -> ImageRef:
    """Parse `text` as Docker would, or raise ImageRefError saying what is wrong."""
    if not text or text != text.strip():
        raise ImageRefError("empty, or has spaces around it")
    if _HEX64.fullmatch(text):
        # distribution/reference ParseNormalizedNamed: an image ID, not a reference.
        raise ImageRefError("a bare 64-hex image ID, not a repository reference")
    rest, _, digest = text.partition("@")
    if "@" in text and not digest:
        raise ImageRefError("nothing after '@'")
    name, tag = rest, None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:  # a ':' after the last '/' starts the tag (before it: a registry port)
        name, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ImageRefError(
                f"tag {tag!r} is not a tag (letters, digits, '_', '.', '-'; at most 128; "
                "not starting with '.' or '-')"
            )
    if digest and not SHA256.fullmatch(digest):
        raise ImageRefError(
            f"digest {digest!r} is not sha256: followed by 64 lower-case hex digits"
        )
    domain, path = _split_domain(name)
    if not _DOMAIN.fullmatch(domain):
        raise ImageRefError(f"registry {domain!r} is not a host name or address")
    if path.lower() != path:
        raise ImageRefError(f"repository {path!r} must be lower case")
    if not _REMOTE_NAME.fullmatch(path):
        raise ImageRefError(
            f"repository {path!r} is not a repository path (lower-case letters and digits, "
            "separated by '/', '.', '_', '__' or '-')"
        )
    if len(path) > NAME_MAX:  # the path only, as distribution/reference counts it since aaca75e
        raise ImageRefError(f"the repository path is longer than {NAME_MAX} characters")
    return ImageRef(name=name, domain=domain, path=path, tag=tag, digest=digest or None)


def _split_domain(name: str) -> tuple[str, str]:
    """distribution/reference normalize.go `splitDockerDomain`."""
    first, slash, remainder = name.partition("/")
    if not slash:
        return DOCKER_HUB, f"library/{name}"
    if first == "localhost" or any(c in first for c in ".:") or first.lower() != first:
        domain, path = first, remainder
    else:
        domain, path = DOCKER_HUB, name
    if domain == DOCKER_HUB_LEGACY:
        domain = DOCKER_HUB
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return domain, path
