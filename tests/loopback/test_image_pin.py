"""The image pin: `vllm.image` resolved once to a digest and kept.

Three layers: the reference grammar (distribution/reference's, components/image_ref.py); the
lookup against a real registry (the distribution project's, tests/support/registry.py) behind a
Docker Hub-style token service, with images pushed by a real client (crane); and the program under
mocks, where the pin is registered first and holds every other resource back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import mocks

from components import image_ref, registry
from components.image_pin import ImagePinProvider
from tests.support.mock_outputs import cloud_outputs, pinned_digest
from tests.support.pulumi_program import refused, run_program
from tests.support.registry import Registry

HEX = "0123456789abcdef" * 4


CASES = {
    "vllm/vllm-tpu:nightly": ("docker.io", "vllm/vllm-tpu", "nightly", None, "vllm/vllm-tpu"),
    "ubuntu": ("docker.io", "library/ubuntu", None, None, "ubuntu"),
    "docker.io/ubuntu:24.04": ("docker.io", "library/ubuntu", "24.04", None, "docker.io/ubuntu"),
    "index.docker.io/vllm/vllm-tpu": (
        "docker.io", "vllm/vllm-tpu", None, None, "index.docker.io/vllm/vllm-tpu"
    ),
    "localhost:5000/team/img:v1": (
        "localhost:5000", "team/img", "v1", None, "localhost:5000/team/img"
    ),
    f"us-docker.pkg.dev/p/r/vllm@sha256:{HEX}": (
        "us-docker.pkg.dev", "p/r/vllm", None, f"sha256:{HEX}", "us-docker.pkg.dev/p/r/vllm"
    ),
    f"vllm/vllm-tpu:nightly@sha256:{HEX}": (
        "docker.io", "vllm/vllm-tpu", "nightly", f"sha256:{HEX}", "vllm/vllm-tpu"
    ),
}  # fmt: skip


@pytest.mark.parametrize("text", sorted(CASES))
def test_references_parse_as_docker_reads_them(text: str) -> None:
    """distribution/reference's ParseNormalizedNamed: registry, path, tag, digest."""
    ref = image_ref.parse(text)
    assert (ref.domain, ref.path, ref.tag, ref.digest, ref.name) == CASES[text]
    assert str(ref) == text
    name = CASES[text][4]
    assert ref.pinned("sha256:" + "f" * 64) == f"{name}@sha256:{'f' * 64}"


def test_docker_hub_is_asked_at_its_api_host_and_tagless_means_latest() -> None:
    ref = image_ref.parse("ubuntu")
    assert ref.api_base == "https://registry-1.docker.io"
    assert ref.lookup == "latest"
    assert image_ref.parse("ghcr.io/o/i:t").api_base == "https://ghcr.io"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("vllm/vllm-tpu:", "tag ''"),
        ("vllm/VLLM-tpu:nightly", "must be lower case"),
        ("vllm/vllm-tpu:-bad", "is not a tag"),
        ("vllm/vllm-tpu@sha256:abc", "is not sha256"),
        ("vllm/vllm-tpu@md5:" + HEX, "is not sha256"),
        ("vllm//vllm-tpu", "is not a repository path"),
        (HEX, "image ID"),
        (" vllm/vllm-tpu", "spaces"),
    ],
)
def test_malformed_references_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(image_ref.ImageRefError, match=problem.replace("(", r"\(")):
        image_ref.parse(text)


def test_a_malformed_image_stops_the_program_before_anything_is_created() -> None:
    refused(
        "v5e1",
        {"tpu-vllm:vllm.image": "vllm/vllm-tpu:nightly!"},
        "tpu-vllm:vllm.image",
        ["'vllm/vllm-tpu:nightly!'", "not an image reference", "Fix:", "vllm/vllm-tpu@sha256"],
    )


def test_a_registry_endpoint_with_a_path_is_refused() -> None:
    refused(
        "v5e1",
        {"tpu-vllm:vllm.registryEndpoint": "https://mirror.example.com/v2/"},
        "tpu-vllm:vllm.registryEndpoint",
        ["not a registry base URL", "Fix:"],
    )


# --- The program under mocks -----------------------------------------------------------------


def test_every_node_runs_the_pinned_digest_and_the_output_names_it() -> None:
    run = run_program("v5e1")
    expected = f"vllm/vllm-tpu@{pinned_digest('vllm/vllm-tpu:nightly')}"
    assert run.outputs["image"] == expected
    start = run.named("vllm-start").inputs["create"]
    assert expected in start and "vllm/vllm-tpu:nightly" not in start
    qr = [r for r in run.of_type("pulumi-python:dynamic:Resource") if "qr_id" in r.inputs]
    assert qr[0].inputs["image"] == expected  # a new digest means a successor node


def test_every_replica_and_its_cache_containers_run_the_pinned_digest() -> None:
    run = run_program("v6e4-gke")
    pod = run.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    images = {c["name"]: c["image"] for c in [*pod["initContainers"], *pod["containers"]]}
    assert set(images.values()) == {run.outputs["image"]}, images
    assert "@sha256:" in run.outputs["image"]
    # Nothing waits for the kubelet's imageID any more: no pod-reader Role, no pod_image.py.
    assert not [r for r in run.resources if "pod-reader" in r.name]
    assert "pod_image.py" not in run.named("vllm-scripts").inputs["data"]


def test_a_digest_reference_is_used_as_given() -> None:
    given = "vllm/vllm-tpu@sha256:" + HEX
    run = run_program("v5e1", {"tpu-vllm:vllm.image": given})
    assert run.outputs["image"] == given
    assert given in run.named("vllm-start").inputs["create"]


def test_the_pin_holds_every_other_resource_back() -> None:
    run = run_program("v5e1")
    held = {name for name, deps in run.dependencies.items() if "vllm-image" in deps}
    assert len(run.resources) > 20
    assert {r.name for r in run.resources} - held == {"vllm-image"}


def test_a_pin_that_fails_creates_nothing() -> None:
    """The pin's check refusing (a 404, a 401) fails its registration: nothing else registers."""

    def registry_refuses(args: mocks.MockResourceArgs) -> dict[str, Any]:
        if "reference" in args.inputs:
            raise RuntimeError("tpu-vllm:vllm.image = 'vllm/vllm-tpu:nope': HTTP 404")
        return cloud_outputs(args)

    run = run_program("v5e1", outputs_for=registry_refuses, expect_error=True)
    assert "vllm/vllm-tpu:nope" in str(run.error)
    assert [r.name for r in run.resources if r.name != "vllm-image"] == []


# --- A real registry -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    served = Registry(tmp_path_factory.mktemp("registry"))
    try:
        yield served
    finally:
        served.stop()


def resolve(hub: Registry, text: str) -> str:
    return registry.resolve(image_ref.parse(text), hub.url, sleep=lambda _: None)


@pytest.mark.engine
def test_a_tag_resolves_to_the_digest_a_real_client_pushed(hub: Registry) -> None:
    pushed = hub.push("vllm/vllm-tpu", "nightly", "build one")
    before = len(hub.tokens.requests)
    assert resolve(hub, "vllm/vllm-tpu:nightly") == pushed
    asked = hub.tokens.requests[before:]
    # The Bearer challenge was followed with an anonymous token for pull only.
    assert [a["authorization"] for a in asked] == [""]
    assert asked[0]["query"]["scope"] == ["repository:vllm/vllm-tpu:pull"]
    assert asked[0]["query"]["service"] == ["registry.docker.io"]


@pytest.mark.engine
def test_a_multi_platform_tag_resolves_to_its_index(hub: Registry) -> None:
    hub.push("vllm/vllm-tpu", "amd64", "one platform")
    hub.push("vllm/vllm-tpu", "arm64", "another", oci=True)
    index = hub.push_index("vllm/vllm-tpu", "multi", "amd64", "arm64")
    assert resolve(hub, "vllm/vllm-tpu:multi") == index


@pytest.mark.engine
def test_a_tag_the_registry_lacks_is_not_found_in_its_words(hub: Registry) -> None:
    with pytest.raises(registry.RegistryError) as caught:
        resolve(hub, "vllm/vllm-tpu:no-such-tag")
    assert caught.value.kind == "not_found"
    assert "MANIFEST_UNKNOWN" in str(caught.value) and hub.url in str(caught.value)


@pytest.mark.engine
def test_a_repository_the_registry_refuses_quotes_its_message(hub: Registry) -> None:
    with pytest.raises(registry.RegistryError) as caught:
        resolve(hub, "private/model:latest")
    assert caught.value.kind == "refused"
    assert "HTTP 401" in str(caught.value) and "authentication required" in str(caught.value)


@pytest.mark.engine
def test_a_token_service_that_refuses_is_quoted(hub: Registry) -> None:
    hub.tokens.refuse_with = 403
    try:
        with pytest.raises(registry.RegistryError) as caught:
            resolve(hub, "vllm/vllm-tpu:nightly")
    finally:
        hub.tokens.refuse_with = None
    assert caught.value.kind == "refused"
    assert "HTTP 403" in str(caught.value) and "access to the token refused" in str(caught.value)


@pytest.mark.engine
def test_a_realm_on_the_metadata_server_is_not_followed(tmp_path: Path) -> None:
    steering = Registry(tmp_path, realm="http://169.254.169.254/computeMetadata/v1/token")
    try:
        with pytest.raises(registry.RegistryError, match="link-local"):
            resolve(steering, "vllm/vllm-tpu:nightly")
    finally:
        steering.stop()


@pytest.mark.engine
def test_a_token_service_redirect_into_the_metadata_server_is_not_followed(hub: Registry) -> None:
    """go-containerregistry's `realmRedirectCheck`: every hop is checked as the realm was."""
    hub.tokens.redirect_to = "http://169.254.169.254/computeMetadata/v1/instance/"
    try:
        with pytest.raises(registry.RegistryError, match=r"redirected to .*link-local"):
            resolve(hub, "vllm/vllm-tpu:nightly")
    finally:
        hub.tokens.redirect_to = None


@pytest.mark.engine
def test_the_lookup_sends_no_credentials_even_with_a_netrc(
    hub: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests would add `~/.netrc`'s default login to any host, the token realm included."""
    (tmp_path / ".netrc").write_text("default login someone password NETRC-SENTINEL\n")
    (tmp_path / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    before = len(hub.tokens.requests)
    hub.push("vllm/vllm-tpu", "netrc", "any")
    resolve(hub, "vllm/vllm-tpu:netrc")
    assert [r["authorization"] for r in hub.tokens.requests[before:]] == [""]


@pytest.mark.parametrize(
    "realm",
    [
        "http://169.254.169.254/token",
        "https://10.0.0.5/token",
        "https://127.1/token",
        "https://2130706433/token",
        "https://0x7f000001/token",
        "ftp://auth.example.com/token",
    ],
)
def test_realms_a_registry_could_steer_us_into_are_refused(realm: str) -> None:
    assert registry.realm_problem(realm, "https://registry.example.com")


def test_public_realms_and_the_registrys_own_host_are_followed() -> None:
    assert not registry.realm_problem(
        "https://auth.docker.io/token", "https://registry-1.docker.io"
    )
    assert not registry.realm_problem("http://127.0.0.1:9/token", "http://127.0.0.1:5000")
    # A plain-http realm only for a registry reached over plain http.
    assert registry.realm_problem("http://auth.example.com/t", "https://registry.example.com")


def test_an_unreachable_registry_names_the_address_tried() -> None:
    with pytest.raises(registry.RegistryError) as caught:
        registry.resolve(
            image_ref.parse("vllm/vllm-tpu:nightly"), "http://127.0.0.1:9", sleep=lambda _: None
        )
    assert caught.value.kind == "unreachable"
    assert "http://127.0.0.1:9/v2/vllm/vllm-tpu/manifests/nightly" in str(caught.value)
    assert "Connection refused" in str(caught.value)


# --- The provider's check: when it asks, and what it keeps ----------------------------------


def news(hub: Registry, reference: str, upgrade: str = "") -> dict[str, Any]:
    return {"reference": reference, "upgrade": upgrade, "endpoint": hub.url, "digest": None}


@pytest.mark.engine
def test_the_pin_is_kept_when_the_tag_moves_until_an_upgrade_asks_again(hub: Registry) -> None:
    provider = ImagePinProvider()
    first = hub.push("vllm/vllm-tpu", "moving", "monday")
    pinned = provider.check({}, news(hub, "vllm/vllm-tpu:moving")).inputs
    assert pinned["digest"] == first
    assert pinned["image"] == f"vllm/vllm-tpu@{first}"
    second = hub.push("vllm/vllm-tpu", "moving", "tuesday")
    assert second != first
    kept = provider.check(pinned, news(hub, "vllm/vllm-tpu:moving")).inputs
    assert kept["digest"] == first  # a refresh or renewal run changes nothing
    assert provider.read("id", pinned).outs == pinned
    moved = provider.check(pinned, news(hub, "vllm/vllm-tpu:moving", "2026-12-03")).inputs
    assert moved["digest"] == second
    assert provider.diff("id", pinned, moved).changes is True


@pytest.mark.engine
def test_a_failed_lookup_is_a_check_failure_that_names_key_value_and_fix(hub: Registry) -> None:
    result = ImagePinProvider().check({}, news(hub, "vllm/vllm-tpu:no-such-tag"))
    [failure] = result.failures
    assert failure.property == "reference"
    assert failure.reason.startswith("tpu-vllm:vllm.image = 'vllm/vllm-tpu:no-such-tag': ")
    assert "MANIFEST_UNKNOWN" in failure.reason and "Fix:" in failure.reason
    assert "tpu-vllm:vllm.registryEndpoint" in failure.reason  # it says where it asked


def test_a_digest_reference_asks_no_registry() -> None:
    given = "vllm/vllm-tpu@sha256:" + HEX
    inputs = (
        ImagePinProvider()
        .check({}, {"reference": given, "upgrade": "", "endpoint": "http://127.0.0.1:9"})
        .inputs
    )
    assert inputs["image"] == given
