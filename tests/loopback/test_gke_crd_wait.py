"""The CRD wait (components/gke/crd_wait.py) against a loopback fake of the cluster's API that
serves a CRD at once, after a while, or never (tests/support/fakes/kube_api.py, modelled on the
apiextensions-apiserver's naming, establishing and discovery controllers), with the program's
own kubeconfig and a stand-in `gke-gcloud-auth-plugin`.

What a user would notice: a first `up` on a new cluster failing at the ComputeClass because
pulumi-kubernetes gave up after about a minute; an `up` waiting silently, or forever; an error
that does not say what installs the CRD or how to fix it; a class applied to a cluster whose CRD
drops its zones; the deployer's token in a log line.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.gke import crd_wait
from components.gke.cluster import kubeconfig
from components.gke.crd_wait import COMPUTE_CLASS_CRD as CC
from components.gke.crd_wait import POD_MONITORING_CRD as PM
from components.gke.crd_wait import SECRET_PROVIDER_CLASS_CRD as SPC
from components.gke.crd_wait import ServedCrdsProvider
from components.gke.kube_api import tls_context
from tests.support.fakes.kube_api import (
    FakeCrd,
    FakeKubeApi,
    compute_class_crd,
    pod_monitoring_crd,
    secret_provider_class_crd,
    write_auth_plugin,
)
from tests.support.fakes.loopback import HOST
from tests.support.mock_outputs import existing_cluster
from tests.support.provider_host import provider_blob, run_provider
from tests.support.pulumi_program import ProgramRun, run_program

STACK = "v6e4-gke"
CLUSTER = "projects/test-project/locations/us-east5/clusters/tpu-vllm-v6e4-gke"
TOKEN = "ya29.KUBETOKENSENTINEL0123456789abcdefghijklmnopqrstuvwxyz"
DYNAMIC = "pulumi-python:dynamic:Resource"
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
SPC_TYPE = "kubernetes:secrets-store.csi.x-k8s.io/v1:SecretProviderClass"
POD_MONITORING = "kubernetes:monitoring.googleapis.com/v1:PodMonitoring"


@pytest.fixture(scope="module")
def program() -> ProgramRun:
    return run_program(STACK)


def wait_inputs(run: ProgramRun) -> dict[str, Any]:
    [found] = [r for r in run.of_type(DYNAMIC) if r.name == "vllm-crds"]
    return dict(found.inputs)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    write_auth_plugin(directory, TOKEN)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


@pytest.fixture
def api(tmp_path: Path, plugin_dir: Path) -> Iterator[FakeKubeApi]:
    with FakeKubeApi(tmp_path, TOKEN) as fake:
        fake.crds[CC] = FakeCrd(compute_class_crd())
        fake.crds[SPC] = FakeCrd(secret_provider_class_crd())
        fake.crds[PM] = FakeCrd(pod_monitoring_crd())
        yield fake


def config_for(fake: FakeKubeApi, ca_pem: str | None = None) -> str:
    """The kubeconfig the program builds (components/gke/cluster.py), for the fake's API."""
    ca = base64.b64encode((ca_pem or fake.ca_pem).encode()).decode()
    return kubeconfig("gke_test-project_us-east5_tpu-vllm-v6e4-gke", fake.endpoint, ca)


def props(program: ProgramRun, fake: FakeKubeApi, **extra: Any) -> dict[str, Any]:
    """The program's own inputs for the wait, aimed at the fake, with bounds of seconds."""
    return {
        **wait_inputs(program),
        "kubeconfig": config_for(fake),
        "timeout_seconds": 1.5,
        "poll_seconds": 0.05,
        "report_seconds": 0.2,
        "__provider": "opaque",
        **extra,
    }


def crd_gets(fake: FakeKubeApi, name: str) -> int:
    return sum(1 for r in fake.requests if r.path.endswith(f"/customresourcedefinitions/{name}"))


# --- the program: what waits for what -------------------------------------------------------


OFF = {"monitoringConfigs": [{"managedPrometheuses": [{"enabled": False}]}]}


@pytest.mark.parametrize(
    ("existing", "monitored"),
    [(None, [PM]), ({}, [PM]), (OFF, [])],
    ids=["new", "old", "old-without-managed-collection"],
)
def test_the_class_and_the_secret_mounts_wait_for_their_crds(
    existing: dict[str, Any] | None, monitored: list[str]
) -> None:
    """On a created cluster and on an existing one; with the kubeconfig pulumi-kubernetes gets,
    the class's own spec, GKE's hour as the bound. The PodMonitoring's CRD too where the stack
    creates one: on a created cluster (managed collection switched on) and an existing one that
    does not report it off; one that reports it off gets a warning and no PodMonitoring."""
    changes = {} if existing is None else {"tpu-vllm:gke.cluster": "shared"}
    call = None if existing is None else existing_cluster(**existing)
    run = run_program(STACK, changes, call=call)
    inputs = wait_inputs(run)
    [provider] = run.of_type("pulumi:providers:kubernetes")
    assert inputs["kubeconfig"] == provider.inputs["kubeconfig"]
    assert [c["name"] for c in inputs["crds"]] == [CC, SPC, *monitored]
    assert len(run.of_type(POD_MONITORING)) == len(monitored)
    assert inputs["timeout_seconds"] == crd_wait.CRD_WAIT_TIMEOUT_SECONDS == 3600
    assert inputs["compute_class_spec"] == run.one(COMPUTE_CLASS).inputs["spec"]
    # The namespace too: every namespaced object follows it, so nothing reaches the cluster first.
    waiting = ["vllm-namespace", "vllm-compute-class", "vllm-server-secrets", "vllm-probe-secrets"]
    for name in waiting + (["vllm-pod-monitoring"] if monitored else []):
        assert "vllm-crds" in run.dependencies[name], name
    assert {r.name for r in run.of_type(SPC_TYPE)} == {"vllm-server-secrets", "vllm-probe-secrets"}


def test_a_preview_of_a_new_cluster_registers_the_wait_without_a_cluster() -> None:
    """`pulumi preview` never calls a dynamic provider's create: no cluster is asked."""
    run = run_program(STACK, preview=True)
    assert wait_inputs(run)["crds"]
    assert run.error is None


# --- the wait, against the fake -------------------------------------------------------------


def test_crds_already_served_pass_at_once_with_the_plugins_token(
    program: ProgramRun, api: FakeKubeApi, plugin_dir: Path
) -> None:
    result = ServedCrdsProvider().create(props(program, api))
    assert result.outs is not None
    assert result.outs["served"] == {CC: "v1", SPC: "v1", PM: "v1"}
    assert (crd_gets(api, CC), crd_gets(api, SPC), crd_gets(api, PM)) == (1, 1, 1)
    assert {r.authorization for r in api.requests} == {f"Bearer {TOKEN}"}
    [call] = [json.loads(line) for line in (plugin_dir / "plugin.log").read_text().splitlines()]
    info = json.loads(call["exec_info"])  # client-go's KUBERNETES_EXEC_INFO, provideClusterInfo
    assert call["argv"] == [] and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == api.url


@pytest.mark.parametrize(
    "phase",
    [
        (0.5, 0.0, "not installed yet"),
        (0.0, 0.5, "installed, not established yet (Installing: the initial names"),
    ],
    ids=["absent", "installing"],
)
def test_a_late_crd_is_waited_for_with_progress_lines(
    program: ProgramRun, api: FakeKubeApi, capsys: pytest.CaptureFixture[str], phase: Any
) -> None:
    appear, establish, seen = phase
    api.crds[CC].appear_after, api.crds[CC].establish_after = appear, establish
    result = ServedCrdsProvider().create(props(program, api, timeout_seconds=10.0))
    assert result.outs is not None and result.outs["served"][CC] == "v1"
    assert crd_gets(api, CC) > 1 and crd_gets(api, SPC) == 1  # served once, not asked again
    err = capsys.readouterr().err
    waiting = [line for line in err.splitlines() if "waiting for CRDs" in line]
    assert waiting and all(CLUSTER in line and "of at most 10 s" in line for line in waiting)
    assert any(f"{CC}: {seen}" in line for line in waiting)
    assert f"{CLUSTER}: CRDs served after" in err


@pytest.mark.parametrize(
    ("name", "texts"),
    [
        (CC, ["cluster autoscaler", "up to an hour", f"`kubectl get crd {CC}`"]),
        (
            SPC,
            [
                "Secret Manager add-on",
                "gcloud container clusters update tpu-vllm-v6e4-gke --location us-east5 "
                "--enable-secret-manager",
            ],
        ),
        (
            PM,
            [
                "managed collection",
                "gcloud container clusters update tpu-vllm-v6e4-gke --location us-east5 "
                "--enable-managed-prometheus",
                "tpu-vllm:monitoring.enabled",
            ],
        ),
    ],
    ids=["compute-class", "secret-provider-class", "pod-monitoring"],
)
def test_a_crd_that_never_comes_stops_the_up_naming_it_its_installer_and_the_fix(
    program: ProgramRun, api: FakeKubeApi, name: str, texts: list[str]
) -> None:
    api.crds[name].appear_after = None
    with pytest.raises(Exception, match="was not served within") as caught:
        ServedCrdsProvider().create(props(program, api, timeout_seconds=0.5))
    message = str(caught.value)
    assert name in message and CLUSTER in message and "not installed yet" in message
    assert "Fix:" in message and "pulumi up" in message
    for text in texts:
        assert text in message
    assert TOKEN not in message


# --- the served ComputeClass schema ---------------------------------------------------------


def test_an_early_compute_class_crd_is_refused_before_the_class_is_applied(
    program: ProgramRun, api: FakeKubeApi
) -> None:
    """datreeio's first ComputeClass schema: no `priorities[].location` (the API server would
    prune the zones) and a rule refusing flex-start with TPUs."""
    api.crds[CC] = FakeCrd(compute_class_crd(early=True))
    with pytest.raises(Exception, match="older than the class the stack sends") as caught:
        ServedCrdsProvider().create(props(program, api))
    message = str(caught.value)
    assert "spec.priorities[].location" in message
    assert "Flex Start provisioning model doesn't support TPUs" in message
    assert "gcloud container clusters upgrade tpu-vllm-v6e4-gke --location us-east5 --master" in (
        message
    )


def test_a_spot_class_is_refused_by_the_early_crd_only_for_its_location(api: FakeKubeApi) -> None:
    spot = run_program(
        STACK, {"tpu-vllm:tpu.provisioning": "spot", "tpu-vllm:tpu.maxRunDuration": None}
    )
    ServedCrdsProvider().create(props(spot, api))  # the current schema carries it
    api.crds[CC] = FakeCrd(compute_class_crd(early=True))
    with pytest.raises(Exception, match="location") as caught:
        ServedCrdsProvider().create(props(spot, api))
    assert "support TPUs" not in str(caught.value)


# --- refusals -------------------------------------------------------------------------------


def test_a_refused_read_names_the_permission_without_waiting(
    program: ProgramRun, api: FakeKubeApi
) -> None:
    api.state.forbidden = True
    with pytest.raises(Exception, match=r"container\.customResourceDefinitions\.get"):
        ServedCrdsProvider().create(props(program, api, timeout_seconds=60.0))
    assert len(api.requests) == 1


def test_a_refused_token_is_fetched_again_once_then_reported(
    program: ProgramRun, api: FakeKubeApi, plugin_dir: Path
) -> None:
    api.state.token = "another-token"
    with pytest.raises(Exception, match=r"refused the credentials .*gcloud auth login"):
        ServedCrdsProvider().create(props(program, api, timeout_seconds=60.0))
    assert len((plugin_dir / "plugin.log").read_text().splitlines()) == 2


def test_a_certificate_the_kubeconfigs_ca_does_not_sign_is_an_error(
    program: ProgramRun, api: FakeKubeApi, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with FakeKubeApi(other, TOKEN) as stranger:
        wrong = config_for(api, ca_pem=stranger.ca_pem)
    with pytest.raises(Exception, match="does not verify"):
        ServedCrdsProvider().create(props(program, api, kubeconfig=wrong, timeout_seconds=60.0))


def test_a_missing_plugin_names_the_install_command(
    program: ProgramRun, api: FakeKubeApi, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (plugin_dir / "gke-gcloud-auth-plugin").unlink()
    monkeypatch.setenv("PATH", str(plugin_dir))  # not the machine's own plugin, if it has one
    with pytest.raises(Exception, match="gcloud components install gke-gcloud-auth-plugin"):
        ServedCrdsProvider().create(props(program, api))


# --- why the wait is needed: pulumi-kubernetes' own retries ---------------------------------


def no_match_retries(fake: FakeKubeApi, scale: float) -> bool:
    """pulumi-kubernetes' create of a custom resource (`provider/pkg/await/await.go`): up to
    `WithMaxRetries(5)` retries of a "no matches for kind", sleeping 1 s doubling
    (`provider/pkg/retry/retry.go`), each after a fresh discovery of the kind. Times x `scale`."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cadata=fake.ca_pem)
    wait = 1.0
    for _ in range(6):
        request = urllib.request.Request(  # noqa: S310 - the fake's https URL
            f"{fake.url}/apis/cloud.google.com/v1", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        try:
            with urllib.request.urlopen(request, context=context) as answer:  # noqa: S310
                if "computeclasses" in answer.read().decode():
                    return True
        except urllib.error.HTTPError:
            pass
        time.sleep(wait * scale)
        wait *= 2
    return False


def test_pulumi_kubernetes_alone_gives_up_on_a_late_crd_and_the_wait_covers_it(
    program: ProgramRun, api: FakeKubeApi
) -> None:
    """63 s of retries against a CRD that comes after 100 s (both x 0.01): without the wait the
    class would fail; after the wait its first try finds the kind."""
    api.crds[CC].appear_after = 1.0
    assert not no_match_retries(api, scale=0.01)
    ServedCrdsProvider().create(props(program, api, timeout_seconds=20.0))
    assert no_match_retries(api, scale=0.01)


# --- the engine's view: diff, a fresh provider host, the token ------------------------------


def test_diff_waits_again_only_when_the_cluster_the_crds_or_the_class_change(
    program: ProgramRun, api: FakeKubeApi
) -> None:
    olds = props(program, api)
    diff = ServedCrdsProvider().diff
    assert not diff("id", olds, dict(olds)).changes
    assert not diff("id", olds, {**olds, "timeout_seconds": 9.0}).changes
    assert diff("id", olds, {**olds, "kubeconfig": config_for(api).replace("127", "10")}).changes
    spec = {**olds["compute_class_spec"], "whenUnsatisfiable": "ScaleUpAnyway"}
    assert diff("id", olds, {**olds, "compute_class_spec": spec}).changes


@pytest.mark.parametrize("served", [True, False], ids=["served", "never"])
def test_in_a_fresh_provider_host_the_token_reaches_only_the_api(
    program: ProgramRun, api: FakeKubeApi, plugin_dir: Path, served: bool
) -> None:
    """Unpickled in a new interpreter as Pulumi's provider host runs it; the token (a sentinel)
    is in no output, progress line or error, only in the fake's Authorization header."""
    if not served:
        api.crds[CC].appear_after = None
    script = (
        "import json\n"
        f"props = json.loads({json.dumps(json.dumps(props(program, api, timeout_seconds=0.6)))})\n"
        "print(json.dumps(provider.create(props).outs))\n"
    )
    done = run_provider(
        provider_blob(program, "vllm-crds"), script, env={"PATH": f"{plugin_dir}:/usr/bin:/bin"}
    )
    assert (done.returncode == 0) is served, done.stderr
    assert ("CRDs served after" in done.stderr) is served
    assert ("was not served within" in done.stderr) is not served
    assert TOKEN not in done.stdout + done.stderr
    assert {r.authorization for r in api.requests} == {f"Bearer {TOKEN}"}


# --- TLS: Python 3.13's strict verification against an older cluster's certificates ---------


_DEFAULT_CONTEXT = ssl.create_default_context


def _context_as_python_313(*args: Any, **kwargs: Any) -> ssl.SSLContext:
    """`ssl.create_default_context` as Python 3.13 and later build it: the same context plus
    `VERIFY_X509_STRICT` and `VERIFY_X509_PARTIAL_CHAIN` in its verify flags (CPython
    `Lib/ssl.py` `create_default_context`; "Changed in version 3.13" in the `ssl` docs)."""
    context = _DEFAULT_CONTEXT(*args, **kwargs)
    context.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


@pytest.fixture
def python_313_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssl, "create_default_context", _context_as_python_313)


@pytest.fixture
def old_cluster(tmp_path: Path, plugin_dir: Path) -> Iterator[FakeKubeApi]:
    """An API whose CA has no Subject Key Identifier and whose certificate has no Authority
    Key Identifier, as older GKE clusters' (urllib3 #3614, kubernetes-client/python #2394)."""
    directory = tmp_path / "old"
    directory.mkdir()
    with FakeKubeApi(directory, TOKEN, key_identifiers=False) as fake:
        fake.crds[CC] = FakeCrd(compute_class_crd())
        fake.crds[SPC] = FakeCrd(secret_provider_class_crd())
        fake.crds[PM] = FakeCrd(pod_monitoring_crd())
        yield fake


def test_strict_verification_refuses_the_old_clusters_certificate(
    old_cluster: FakeKubeApi, python_313_tls: None
) -> None:
    """The premise, on the Python that runs the tests: a context built as 3.13 builds it
    refuses the certificate without an Authority Key Identifier. On 3.11/3.12 the flag is not
    a default, so the fixture sets it the way 3.13 does; on 3.13+ it changes nothing."""
    context = ssl.create_default_context(cadata=old_cluster.ca_pem)
    with (
        socket.create_connection((HOST, old_cluster.port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match="Authority Key Identifier"),
    ):
        context.wrap_socket(raw, server_hostname=HOST).close()


def test_an_old_clusters_certificate_without_key_identifiers_is_accepted(
    program: ProgramRun, old_cluster: FakeKubeApi, python_313_tls: None
) -> None:
    """Python 3.11+ is allowed (README), so the wait must pass on 3.13 against an older GKE
    cluster: only `VERIFY_X509_STRICT` is cleared (components/gke/kube_api.py `tls_context`)."""
    result = ServedCrdsProvider().create(props(program, old_cluster))
    assert result.outs is not None and result.outs["served"][CC] == "v1"
    context = tls_context(old_cluster.ca_pem)
    assert not context.verify_flags & ssl.VERIFY_X509_STRICT
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_without_strict_mode_a_wrong_host_or_an_unknown_ca_is_still_refused(
    program: ProgramRun, old_cluster: FakeKubeApi, tmp_path: Path, python_313_tls: None
) -> None:
    """The server's certificate names 127.0.0.1 only: `localhost` is the wrong name. A
    kubeconfig with another cluster's CA (also without key identifiers, and of the same name)
    does not verify it."""
    wrong_host = config_for(old_cluster).replace(f"https://{HOST}:", "https://localhost:")
    with pytest.raises(Exception, match=r"does not verify .*[Hh]ostname mismatch"):
        ServedCrdsProvider().create(props(program, old_cluster, kubeconfig=wrong_host))
    other = tmp_path / "other"
    other.mkdir()
    with FakeKubeApi(other, TOKEN, key_identifiers=False) as stranger:
        wrong_ca = config_for(old_cluster, ca_pem=stranger.ca_pem)
    with pytest.raises(Exception, match=r"CA does not verify \(certificate signature failure\)"):
        ServedCrdsProvider().create(props(program, old_cluster, kubeconfig=wrong_ca))
    assert old_cluster.requests == []  # no request, so no token, reached the wrong server


# --- throttling: 429 Too Many Requests is "try again", after its Retry-After ----------------


def test_a_429_holds_the_wait_for_its_retry_after_then_the_crds_are_read(
    program: ProgramRun, api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server throttles with 429 and `Retry-After` (its max-in-flight and Priority and
    Fairness filters); client-go waits that long and tries again (rest/request.go checkWait).
    The wait does the same, asks nothing more in a throttled round, and is not ended by it.
    The pauses are recorded instead of slept: what is asserted is the delay asked for."""
    api.state.throttle, api.state.retry_after = 2, "3"
    pauses: list[float] = []
    monkeypatch.setattr(crd_wait, "_pause", pauses.append)
    result = ServedCrdsProvider().create(props(program, api, timeout_seconds=60.0))
    assert result.outs is not None
    assert result.outs["served"] == {CC: "v1", SPC: "v1", PM: "v1"}
    assert pauses == [3.0, 3.0]
    assert len(api.requests) == 2 + 3  # two throttled rounds of one request, then each CRD


def test_a_429_without_retry_after_is_tried_again_at_the_next_poll(
    program: ProgramRun, api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.state.throttle, api.state.retry_after = 1, None
    pauses: list[float] = []
    monkeypatch.setattr(crd_wait, "_pause", pauses.append)
    result = ServedCrdsProvider().create(props(program, api, timeout_seconds=60.0))
    assert result.outs is not None and result.outs["served"][CC] == "v1"
    assert pauses == [0.05]  # the poll interval the props set


def test_throttling_that_never_ends_stops_at_the_bound_naming_the_429(
    program: ProgramRun, api: FakeKubeApi
) -> None:
    api.state.throttle = 10**6
    with pytest.raises(Exception, match="was not served within") as caught:
        ServedCrdsProvider().create(props(program, api, timeout_seconds=0.5))
    message = str(caught.value)
    assert "429 Too Many Requests, Retry-After 1 s" in message
    assert TOKEN not in message
