"""The stack's image pin: `vllm.image` resolved to one digest, kept in the stack's state.

A tag names different bytes from one day to the next, so a renewal or a rescheduled replica would
run whatever it names then (a cold compile cache, mixed builds behind one address). `check`
resolves the tag only when `vllm.image` or `vllm.imageUpgrade` changed, so the preview shows the
new digest (the engine previews an update's outputs as its inputs: provider_plugin.go); `read`
keeps the state. docs/operations.md "Upgrade the image"; keep this module where it is
(docs/architecture.md "Dynamic providers").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components import image_ref, registry
from components.engine_values import without_provider

KEY = "tpu-vllm:vllm.image"
ENDPOINT_KEY = "tpu-vllm:vllm.registryEndpoint"


def lookup_problem(reference: str, endpoint: str, error: Exception) -> str:
    """`KEY = VALUE: what happened. Fix: ...` for a lookup that failed."""
    if isinstance(error, image_ref.ImageRefError):
        return (
            f"{KEY} = {reference!r}: {error}. Fix: an image reference such as {image_ref.EXAMPLE}"
        )
    kind = getattr(error, "kind", "")
    fixes = {
        "not_found": (
            "check the repository and tag (`docker manifest inspect "
            f"{reference}` shows what the registry has), or give a digest you know exists"
        ),
        "refused": (
            "make the repository public or use one the registry lets anyone pull; a private "
            "registry needs a mirror that serves it without credentials "
            f"({ENDPOINT_KEY})"
        ),
        "unreachable": (
            "check this machine's network and proxy settings, or point "
            f"{ENDPOINT_KEY} at a mirror you can reach; nodes pull from the same registry"
        ),
    }
    fix = fixes.get(kind, "try again later, or give the image as NAME@sha256:DIGEST")
    via = f" (asked {endpoint}, {ENDPOINT_KEY})" if endpoint else ""
    return f"{KEY} = {reference!r}: {error}{via}. Fix: {fix}"


def report(message: str) -> None:
    print(f"tpu-vllm: {message}", file=sys.stderr, flush=True)


class ImagePinProvider(dyn.ResourceProvider):
    """check resolves (only when it must); create/update store; read keeps what is stored."""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        reference = str(news.get("reference") or "")
        endpoint = str(news.get("endpoint") or "")
        try:
            ref = image_ref.parse(reference)
        except image_ref.ImageRefError as error:
            problem = lookup_problem(reference, endpoint, error)
            return dyn.CheckResult(news, [dyn.CheckFailure("reference", problem)])
        same = olds.get("reference") == reference and olds.get("upgrade") == news.get("upgrade")
        kept = olds.get("digest")
        if same and isinstance(kept, str) and image_ref.SHA256.fullmatch(kept):
            digest = kept
        else:
            try:
                digest = registry.resolve(ref, endpoint or None)
            except registry.RegistryError as error:
                problem = lookup_problem(reference, endpoint, error)
                return dyn.CheckResult(news, [dyn.CheckFailure("reference", problem)])
            if not ref.digest:
                where = endpoint or ref.api_base
                report(f"{reference} is {digest} at {where}; the stack now serves that digest")
        return dyn.CheckResult({**news, "digest": digest, "image": ref.pinned(digest)}, [])

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        outs = without_provider(props)
        return dyn.CreateResult(id_=str(outs["image"]), outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        keys = ("reference", "upgrade", "endpoint", "digest")
        return dyn.DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs=without_provider(news))

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        return dyn.ReadResult(id_=id_, outs=props)


@dataclass(frozen=True, kw_only=True)
class ImagePinArgs:
    """The image reference to pin, when to look again (`vllm.imageUpgrade`), and the registry."""

    reference: str
    upgrade: str
    endpoint: str


class ImagePin(dyn.Resource):
    """`image` is `NAME@sha256:...`, what every node and replica runs; `digest` its digest."""

    image: pulumi.Output[str]
    digest: pulumi.Output[str]
    reference: pulumi.Output[str]

    def __init__(
        self, name: str, args: ImagePinArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        ref = image_ref.parse(args.reference)  # config validated it: this cannot fail here
        super().__init__(
            ImagePinProvider(),
            name,
            {
                "reference": args.reference,
                "upgrade": args.upgrade,
                "endpoint": args.endpoint,
                # Filled by `check`; a digest reference is its own.
                "digest": ref.digest,
                "image": ref.pinned(ref.digest) if ref.digest else None,
            },
            opts,
        )


def hold_everything_for(pin: pulumi.Resource) -> None:
    """Every resource registered after this waits for `pin`, so a failed lookup creates none.
    A stack transformation runs in the SDK, under the engine and mocks alike, and `depends_on`
    changes no URN."""

    def wait_for_pin(
        args: pulumi.ResourceTransformationArgs,
    ) -> pulumi.ResourceTransformationResult | None:
        if args.resource is pin:
            return None
        opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(depends_on=[pin]))
        return pulumi.ResourceTransformationResult(args.props, opts)

    pulumi.runtime.register_stack_transformation(wait_for_pin)
