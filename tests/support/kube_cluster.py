"""A real Kubernetes control plane on 127.0.0.1, for the GKE stack's tests.

It runs the binaries `scripts/kube/build.sh` makes from the Go module proxy: etcd, kube-apiserver
(RBAC, its own CA and certificates, service-account tokens), kube-controller-manager (the
controllers the stack's objects need), kube-scheduler, and kwok, which plays the nodes and their
pods' lifecycles without a kubelet, with the stage configs of its own module
(`kustomize/stage/node/fast`, `node/heartbeat-with-lease`, `pod/fast` but its delete stage, and
`pod/general`'s delete stage: a scheduled pod becomes Running and Ready, a Job's pod then
Succeeded, a deleted pod lingers up to its grace period; nothing in the containers runs).

The nodes are shaped like the ones the GKE stack gets (docs/gke.md): a v6e 2x2 slice node with
the TPU node labels GKE sets (`cloud.google.com/gke-tpu-accelerator`, `...-topology`), the
`google.com/tpu` taint and allocatable, and the ComputeClass label and taint that node
auto-provisioning adds (GKE "About custom compute classes"); plus one untainted system node, as
a cluster's default pool gives.

Flags are the ones kube-apiserver, kube-controller-manager and kube-scheduler v1.34 document
(`--help` of each; k8s.io/kubernetes cmd/*/app/options); the certificate layout follows
"PKI certificates and requirements" (kubernetes.io/docs/setup/best-practices/certificates).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.promql import go_command

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "kube" / "build.sh"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the first address of the range: the `kubernetes` Service
# The controllers the stack's objects exercise, by their v1.34 names
# (kube-controller-manager --help, "--controllers"): tokens for service accounts, the garbage
# collector for ownerReferences and foreground deletion, Deployments and their ReplicaSets,
# Jobs, PodDisruptionBudget status, Service endpoints (pulumi-kubernetes' Service await reads
# them), namespace deletion, and the kube-root-ca.crt ConfigMap every namespace gets.
CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "disruption-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "namespace-controller",
    # Lifts the node.kubernetes.io/not-ready taint the API server puts on every new node
    # (TaintNodesByCondition) once the node reports Ready.
    "node-lifecycle-controller",
    "root-ca-certificate-publisher-controller",
)
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


class KubeToolsMissing(RuntimeError):
    """scripts/kube/build.sh has not built the tools on this machine."""


def tools_bin() -> Path:
    """The bin directory of a finished `scripts/kube/build.sh`, or KubeToolsMissing."""
    done = subprocess.run([str(BUILD), "--print-bin"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KubeToolsMissing(done.stderr.strip() or "scripts/kube/build.sh --print-bin failed")
    return Path(done.stdout.strip().splitlines()[-1])


def tools_or_skip() -> Path:
    """`tools_bin()`, or a skip naming the build (a failure under TPU_VLLM_REQUIRE_KUBE=1,
    tests/conftest.py)."""
    try:
        return tools_bin()
    except KubeToolsMissing as err:
        pytest.skip(f"the Kubernetes tools are not built ({err}); run scripts/kube/build.sh")


@contextlib.contextmanager
def running(work: Path, *, deployer_token: str | None = None) -> Iterator[ControlPlane]:
    """A started control plane in `work`, stopped on the way out whatever happens."""
    plane = ControlPlane(work, bin_dir=tools_or_skip(), deployer_token=deployer_token)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


def kwok_stage_files() -> list[Path]:
    """kwok's own node and pod stages, read from its Go module (go.sum-checked)."""
    done = subprocess.run(
        [
            go_command("to find kwok's stage configs"),
            "mod",
            "download",
            "-json",
            "sigs.k8s.io/kwok",
        ],
        cwd=REPO / "scripts" / "kube" / "kwok",
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
        timeout=600,
    )
    module = Path(json.loads(done.stdout)["Dir"])
    stages = module / "kustomize" / "stage"
    # node-initialize makes a node Ready; the heartbeat with a lease keeps it so, as a kubelet
    # does, so the node lifecycle controller lifts the not-ready taint and never evicts.
    # Stage documents only: kwok skips the kustomization.yaml beside them with a warning.
    files = sorted((stages / "node" / "fast").glob("node-*.yaml"))
    files += sorted((stages / "node" / "heartbeat-with-lease").glob("node-*.yaml"))
    # Pods start and complete at once (pod/fast), but a deleted pod lingers as a kubelet's does
    # while its containers stop: pod/general's `pod-delete` removes it, once its finalizers are
    # gone, after 1 s plus a random part of what is left of its grace period (kwok
    # pkg/utils/lifecycle `Delay`, the jitter up to `.metadata.deletionTimestamp`; at once when
    # at most 1 s is left). Each update of the pod draws again, so the linger is the earliest
    # of several draws. The API server itself deletes with grace 0 a pod that never ran or has
    # finished (pkg/registry/core/pod/strategy.go `CheckGracefulDelete`): Job pods go at once.
    # pod/fast's delete stage would remove every pod at once, so nothing could show what else
    # goes while server pods are still terminating.
    files += [f for f in sorted((stages / "pod" / "fast").glob("pod-*.yaml"))
              if f.name != "pod-delete.yaml"]  # fmt: skip
    files.append(stages / "pod" / "general" / "pod-delete.yaml")
    return files


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Identity:
    """A client certificate: its file pair and a kubeconfig that uses it."""

    cert: Path
    key: Path
    kubeconfig: Path


class Pki:
    """A cluster CA and the certificates signed by it, written under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpu-vllm-test-ca")])
        self._ca_name = name
        now = dt.datetime.now(dt.UTC)
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()), critical=False
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self._ca = ca
        self.ca = self._write("ca.crt", ca.public_bytes(serialization.Encoding.PEM))

    def _write(self, name: str, data: bytes) -> Path:
        path = self.root / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def issue(
        self, name: str, common_name: str, *, groups: tuple[str, ...] = (), server: bool = False
    ) -> tuple[Path, Path]:
        """A key and certificate: a client one (CN user, O groups) or the API server's own."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                critical=False,
            )
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName(n)
                for n in (
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                )
            ]
            names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", SERVICE_IP)]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        return (
            self._write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{name}.key", key_pem),
        )

    def service_account_key(self) -> Path:
        """The key the API server signs service-account tokens with (and verifies them by)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return self._write(
            "sa.key",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
        )


def write_kubeconfig(
    path: Path, server: str, ca: Path, *, cert: Path, key: Path, user: str
) -> Path:
    """A kubeconfig with one cluster, one user and one current context (clientcmd v1 layout)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


def tpu_node(name: str, compute_class: str) -> dict[str, Any]:
    """A node as GKE makes one for a v6e 2x2 slice in a ComputeClass (docs/gke.md)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "ct6e-standard-4t",
                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                "cloud.google.com/gke-tpu-topology": "2x2",
                "cloud.google.com/compute-class": compute_class,
                "cloud.google.com/gke-provisioning": "flex-start",
            },
        },
        "spec": {
            "taints": [
                {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
                {
                    "key": "cloud.google.com/compute-class",
                    "value": compute_class,
                    "effect": "NoSchedule",
                },
            ]
        },
        # ct6e-standard-4t: 4 chips, 180 vCPU, 720 GB (GKE's TPU machine shapes); allocatable
        # as GKE Standard reserves (GKE docs "Plan GKE node sizes": 0.52 vCPU; 20.3 GiB of
        # 670.6 GiB, and 100 MiB for eviction). kwok's node-initialize stage keeps a status it
        # is given.
        "status": {
            "allocatable": {
                "cpu": "179480m",
                "memory": "650Gi",
                "pods": "110",
                "google.com/tpu": "4",
            },
            "capacity": {"cpu": "180", "memory": "720G", "pods": "110", "google.com/tpu": "4"},
        },
    }


def system_node(name: str) -> dict[str, Any]:
    """An untainted node, as a cluster's default pool gives."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "status": {
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
        },
    }


class ControlPlane:
    """etcd, kube-apiserver, the controller manager, the scheduler and kwok, on 127.0.0.1."""

    def __init__(
        self, work: Path, *, bin_dir: Path | None = None, deployer_token: str | None = None
    ) -> None:
        self.work = work
        #: A bearer token the API server accepts for a cluster administrator: what
        #: `gke-gcloud-auth-plugin` hands client-go for a deployer GKE's IAM lets administer
        #: the cluster (here `--token-auth-file`, group system:masters).
        self.deployer_token = deployer_token
        self.bin = bin_dir or tools_bin()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.started_seconds = 0.0
        self.warnings: list[str] = []
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.pki = Pki(work / "pki")
        cert, key = self.pki.issue("admin", "tpu-vllm-test-admin", groups=("system:masters",))
        self.admin = Identity(
            cert,
            key,
            write_kubeconfig(
                work / "admin.kubeconfig",
                self.server,
                self.pki.ca,
                cert=cert,
                key=key,
                user="admin",
            ),
        )
        self._ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        self._ctx.load_cert_chain(str(cert), str(key))

    # --- processes ---

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = self.work / f"{name}.log"
        self.logs[name] = log
        # A HOME of its own: kwok reads ~/.kwok/kwok.yaml before its --config files if present.
        home = self.work / "home"
        home.mkdir(exist_ok=True)
        with log.open("wb") as out:
            self.procs[name] = subprocess.Popen(
                argv,
                env={**os.environ, "HOME": str(home)},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs.get(name)
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def _wait(self, what: str, ready: Any, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"control plane: {what} not ready in {timeout:.0f} s")

    def start(self) -> ControlPlane:
        t0 = time.monotonic()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
            self._start_kwok()
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - t0
        return self

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name=test",
                f"--data-dir={self.work / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=test=http://127.0.0.1:{peer}",
                # A test's data need not survive a power cut; fsync dominates on a shared disk.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"{self.etcd_url}/health"), 60)

    def _start_apiserver(self) -> None:
        cert, key = self.pki.issue("apiserver", "kube-apiserver", server=True)
        sa_key = self.pki.service_account_key()
        self.sa_key = sa_key
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.work / 'apiserver'}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                f"--client-ca-file={self.pki.ca}",
                *self._token_auth(),
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait("kube-apiserver", self._readyz, 120)

    def _token_auth(self) -> list[str]:
        """`--token-auth-file`: CSV of token, user, uid, "groups" (kube-apiserver --help,
        `pkg/authentication/token/tokenfile`)."""
        if self.deployer_token is None:
            return []
        path = self.work / "tokens.csv"
        path.write_text(f'{self.deployer_token},deployer,deployer,"system:masters"\n')
        path.chmod(0o600)
        return [f"--token-auth-file={path}"]

    def _readyz(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.server}/readyz", context=self._ctx, timeout=5) as r:  # noqa: S310 - https on loopback
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _identity(self, name: str, user: str) -> Path:
        cert, key = self.pki.issue(name, user)
        return write_kubeconfig(
            self.work / f"{name}.kubeconfig",
            self.server,
            self.pki.ca,
            cert=cert,
            key=key,
            user=user,
        )

    def _served_as(self, name: str, user: str) -> list[str]:
        """The flags kube-controller-manager and kube-scheduler share: their own user for the
        API and for checking callers of their own HTTPS port, which listens on loopback."""
        kubeconfig = self._identity(name, user)
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={self.work / name}",
            "--leader-elect=false",
            "--v=1",
        ]

    def _start_controllers(self) -> None:
        # Their own users, bound by the API server's default RBAC (system:kube-controller-manager,
        # system:kube-scheduler); each controller then acts as its own service account.
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                *self._served_as("controller-manager", "system:kube-controller-manager"),
                f"--controllers={','.join(CONTROLLERS)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={self.pki.ca}",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin / "kube-scheduler"),
                *self._served_as("scheduler", "system:kube-scheduler"),
            ],
        )
        # The service-account controller makes each namespace's `default` account; wait for it,
        # as every pod is admitted only with its service account present.
        self._wait(
            "service-account controllers",
            lambda: self._has("/api/v1/namespaces/default/serviceaccounts/default"),
        )

    def _start_kwok(self) -> None:
        kw = self._identity("kwok", "kwok-controller")
        # kwok updates node and pod status for nodes it manages: give it cluster-admin.
        self.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "tpu-vllm-test-kwok"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": "kwok-controller",
                    }
                ],
            }
        )
        argv = [
            str(self.bin / "kwok"),
            f"--kubeconfig={kw}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=127.0.0.1",
            # The kubelet's default (--node-lease-duration-seconds of the kubelet config).
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{free_port()}",
        ]
        argv += [f"--config={path}" for path in kwok_stage_files()]
        self._spawn("kwok", argv)

    def add_node(self, node: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Creates a kwok node and waits until it is Ready, as a new GKE node becomes."""
        self.apply(node)
        path = f"/api/v1/nodes/{node['metadata']['name']}"
        self.wait_condition(path, "Ready", timeout)

        # The node lifecycle controller lifts the API server's not-ready taint after Ready.
        def untainted() -> bool:
            taints = self.get(path).get("spec", {}).get("taints") or []
            return not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)

        self._wait(f"{path} not-ready taint lifted", untainted, timeout)
        return self.get(path)

    def stop(self) -> None:
        """SIGTERM each process (kwok first, etcd last), then SIGKILL what is left after 10 s."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)

    def running(self) -> Iterator[str]:
        return (name for name, proc in self.procs.items() if proc.poll() is None)

    # --- API ---

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One API call as the admin; the server's `Warning` headers are kept in `warnings`."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)  # noqa: S310 - loopback
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=30) as resp:  # noqa: S310 - loopback
                self.warnings += resp.headers.get_all("Warning") or []
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            self.warnings += err.headers.get_all("Warning") or []
            return err.code, json.loads(err.read() or b"{}")

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body.get('message', body)}")
        return body

    def _has(self, path: str) -> bool:
        return self.request("GET", path)[0] == 200

    def collection(self, obj: dict[str, Any]) -> str:
        """The collection path an object is created in (namespaced or cluster-scoped)."""
        group_version = obj["apiVersion"]
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        namespace = obj["metadata"].get("namespace")
        plural = PLURALS[obj["kind"]]
        return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"

    def path(self, obj: dict[str, Any]) -> str:
        return f"{self.collection(obj)}/{obj['metadata']['name']}"

    def create(self, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST with strict field validation, as `kubectl apply --validate=strict` asks."""
        return self.request("POST", f"{self.collection(obj)}?fieldValidation=Strict", obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Creates an object, or raises with the server's message."""
        status, body = self.create(obj)
        if status not in (200, 201):
            raise RuntimeError(f"POST {self.collection(obj)}: {status} {body.get('message', body)}")
        return body

    def wait_for(self, what: str, ready: Any, timeout: float = 60.0) -> None:
        """Polls `ready()` while checking that every process still runs."""
        self._wait(what, ready, timeout)

    def install_crd(self, crd: dict[str, Any], timeout: float = 60.0) -> None:
        """Creates a CRD and waits for its Established condition, as GKE's add-ons would."""
        self.apply(crd)
        name = crd["metadata"]["name"]
        self.wait_condition(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            "Established",
            timeout,
        )

    def wait_condition(self, path: str, kind: str, timeout: float = 60.0) -> None:
        """Waits until the object at `path` has status condition `kind` True."""

        def true() -> bool:
            conditions = self.get(path).get("status", {}).get("conditions") or []
            return any(c["type"] == kind and c["status"] == "True" for c in conditions)

        self._wait(f"{path} {kind}", true, timeout)


# Resource names of the kinds the stack and the tests create (the API's discovery documents).
PLURALS = {
    "Node": "nodes",
    "Pod": "pods",
    "Namespace": "namespaces",
    "ConfigMap": "configmaps",
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Deployment": "deployments",
    "Job": "jobs",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "CustomResourceDefinition": "customresourcedefinitions",
    "SecretProviderClass": "secretproviderclasses",
    "PodMonitoring": "podmonitorings",
    "ComputeClass": "computeclasses",
}


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - etcd on loopback
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
