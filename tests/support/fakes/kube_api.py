"""A loopback fake of the two parts of a GKE cluster's API the CRD wait touches, over HTTPS.

What it imitates (kubernetes/kubernetes, staging/src/k8s.io/apiextensions-apiserver):
- `GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/NAME`: 404 with a `Status`
  (reason NotFound) until the CRD is created; then the CRD object, whose status carries
  `NamesAccepted: True (NoConflicts)` and `Established: False (Installing, "the initial names
  have been accepted")`, as `pkg/controller/status/naming_controller.go` sets them, until the
  establishing controller flips `Established` to True (`InitialNamesAccepted`);
- API discovery `GET /apis/GROUP/VERSION`: the APIResourceList of the established CRDs that
  serve that version, 404 while there are none (`pkg/apiserver/
  customresource_discovery_controller.go` lists only Established CRDs' served versions). That
  is where pulumi-kubernetes' RESTMapper looks a kind up;
- authentication: a request without the expected bearer token gets 401 with a `Status`
  (reason Unauthorized); `forbidden` answers 403 (reason Forbidden), as RBAC would;
- throttling: the next `throttle` authenticated requests get 429 with `Retry-After:
  retry_after` and the plain-text body "Too many requests, please try again later.", as the
  API server's max-in-flight and Priority and Fairness filters answer (staging/src/k8s.io/
  apiserver/pkg/server/filters/maxinflight.go, priority-and-fairness.go `tooManyRequests`,
  which call `http.Error`; Priority and Fairness runs after authentication, so a 401 comes
  first).
Time is the fake's own clock since the first request it receives (not since `start()`, so that a
slow test set-up on a loaded machine cannot use up the delays before the client asks):
`appear_after` seconds until the CRD exists (None: never), then `establish_after` seconds more
until it is established.

The ComputeClass CRD is the project's own picture (tests/support/compute_class_crd.py): the current
version from GKE's reference and the ComputeClass API's Go types, and `early=True`, datreeio's
first published copy (2025-05-28: no `priorities[].location`, and the rule refusing flex-start
with TPUs). The PodMonitoring CRD's v1 schema is prometheus-engine's
(`charts/operator/crds/monitoring.googleapis.com_podmonitorings.yaml`), read from its Go module
(tests/support/gmp_crds.py).

`write_auth_plugin` writes a stand-in for `gke-gcloud-auth-plugin` that prints the
ExecCredential kubernetes/cloud-provider-gcp `cmd/gke-gcloud-auth-plugin/cred.go` prints.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support import compute_class_crd as compute_class_definition
from tests.support import gmp_crds
from tests.support.fakes.kube_deployments import status_object
from tests.support.fakes.loopback import HOST, LoopbackHttpServer, send_json

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


def _served(definition: dict[str, Any]) -> dict[str, Any]:
    """A CRD as the API server returns it once stored: with a generation, a resource version,
    the default conversion strategy and the accepted names (the conditions come per request)."""
    crd: dict[str, Any] = json.loads(json.dumps(definition))
    crd["metadata"] |= {"generation": 1, "resourceVersion": "4711"}
    crd["spec"].setdefault("conversion", {"strategy": "None"})
    stored = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
    crd["status"] = {"acceptedNames": crd["spec"]["names"], "storedVersions": stored}
    return crd


def _crd(
    group: str, plural: str, kind: str, scope: str, versions: list[dict[str, Any]]
) -> dict[str, Any]:
    names = {
        "plural": plural,
        "singular": kind.lower(),
        "kind": kind,
        "listKind": f"{kind}List",
    }
    return _served(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "names": names, "scope": scope, "versions": versions},
        }
    )


def compute_class_crd(*, early: bool = False) -> dict[str, Any]:
    """The project's ComputeClass CRD (tests/support/compute_class_crd.py), as the fake serves
    it."""
    return _served(compute_class_definition.crd(early=early))


def pod_monitoring_crd() -> dict[str, Any]:
    """Managed collection's CRD (GKE installs it with managed collection's components): its v1
    schema from prometheus-engine's own CRD manifest, through its Go module
    (tests/support/gmp_crds.py)."""
    schema = {"openAPIV3Schema": gmp_crds.schema("podmonitorings")}
    version = {"name": "v1", "served": True, "storage": True, "schema": schema}
    return _crd(
        "monitoring.googleapis.com", "podmonitorings", "PodMonitoring", "Namespaced", [version]
    )


def secret_provider_class_crd() -> dict[str, Any]:
    """The Secrets Store CSI driver's CRD: v1 stored, v1alpha1 still served."""
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "provider": {"type": "string"},
                        "parameters": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                        "secretObjects": {"type": "array", "items": {"type": "object"}},
                    },
                }
            },
        }
    }
    versions = [
        {"name": "v1", "served": True, "storage": True, "schema": schema},
        {"name": "v1alpha1", "served": True, "storage": False, "schema": schema},
    ]
    return _crd(
        "secrets-store.csi.x-k8s.io",
        "secretproviderclasses",
        "SecretProviderClass",
        "Namespaced",
        versions,
    )


def _conditions(established: bool) -> list[dict[str, str]]:
    names = {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"}
    names["message"] = "no conflicts found"
    done = {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
    pending = {"type": "Established", "status": "False", "reason": "Installing"}
    for condition in (done, pending):
        condition["message"] = "the initial names have been accepted"
    return [names, done if established else pending]


@dataclass
class FakeCrd:
    body: dict[str, Any]
    #: Seconds after the fake's first request until the CRD exists; None: it never does.
    appear_after: float | None = 0.0
    #: Seconds after it appears until it is established.
    establish_after: float = 0.0


@dataclass
class Seen:
    path: str
    authorization: str


@dataclass
class _State:
    token: str
    crds: dict[str, FakeCrd] = field(default_factory=dict)
    forbidden: bool = False
    #: How many of the next authenticated requests are answered 429.
    throttle: int = 0
    #: Their `Retry-After` header (None: sent without one).
    retry_after: str | None = "1"
    #: When the first request arrived (None: none yet); the CRDs' delays count from it.
    started: float | None = None
    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def phase(self, crd: FakeCrd) -> str:
        """`absent`, `installing` or `established` on the fake's clock."""
        now = time.monotonic() - (self.started or time.monotonic())
        if crd.appear_after is None or now < crd.appear_after:
            return "absent"
        return "established" if now >= crd.appear_after + crd.establish_after else "installing"


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization", "")
            with state.lock:
                state.requests.append(Seen(self.path, auth))
                state.started = state.started or time.monotonic()
            if auth != f"Bearer {state.token}":
                send_json(self, 401, status_object(401, "Unauthorized", "Unauthorized"))
            elif state.throttle > 0:
                with state.lock:
                    state.throttle -= 1
                self._too_many_requests()
            elif state.forbidden:
                message = (
                    'customresourcedefinitions.apiextensions.k8s.io is forbidden: User "x" '
                    'cannot get resource "customresourcedefinitions" in API group '
                    '"apiextensions.k8s.io" at the cluster scope'
                )
                send_json(self, 403, status_object(403, "Forbidden", message))
            elif self.path.startswith(CRD_PATH):
                self._crd(self.path[len(CRD_PATH) :])
            else:
                self._discovery(self.path)

        def _too_many_requests(self) -> None:
            body = b"Too many requests, please try again later.\n"  # http.Error adds \n
            self.send_response(429)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("X-Content-Type-Options", "nosniff")
            if state.retry_after is not None:
                self.send_header("Retry-After", state.retry_after)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _crd(self, name: str) -> None:
            crd = state.crds.get(name)
            phase = state.phase(crd) if crd else "absent"
            if crd is None or phase == "absent":
                message = f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found'
                send_json(self, 404, status_object(404, "NotFound", message))
                return
            body = json.loads(json.dumps(crd.body))
            body["status"]["conditions"] = _conditions(phase == "established")
            send_json(self, 200, body)

        def _discovery(self, path: str) -> None:
            group_version = path.removeprefix("/apis/").strip("/")
            resources = []
            for crd in state.crds.values():
                spec = crd.body["spec"]
                for version in spec["versions"]:
                    served = version["served"] and state.phase(crd) == "established"
                    if served and f"{spec['group']}/{version['name']}" == group_version:
                        resources.append(
                            {"name": spec["names"]["plural"], "kind": spec["names"]["kind"]}
                        )
            if not resources:
                send_json(self, 404, status_object(404, "NotFound", "the server could not find it"))
                return
            body = {"kind": "APIResourceList", "groupVersion": group_version}
            send_json(self, 200, {**body, "resources": resources})

    return Handler


def make_certificates(directory: Path, *, key_identifiers: bool = True) -> tuple[str, Path, Path]:
    """A cluster CA and an API server certificate for 127.0.0.1 it signed, as GKE's are:
    (CA PEM, server certificate file, server key file).

    `key_identifiers=False` leaves out the CA's Subject Key Identifier and the server
    certificate's Authority Key Identifier, as on older GKE clusters (urllib3 #3614: "GKE
    cluster with cert, that was created about 4 years ago"), which OpenSSL's strict mode
    (Python 3.13's default) refuses with "Missing Authority Key Identifier"."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-cluster-ca")])
    ca_builder = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), True
        )
    )
    if key_identifiers:
        ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
        ca_builder = ca_builder.add_extension(ski, False)
    ca = ca_builder.sign(ca_key, hashes.SHA256())
    key = ec.generate_private_key(ec.SECP256R1())
    server_builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
    )
    if key_identifiers:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
        server_builder = server_builder.add_extension(aki, False)
    server = server_builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = directory / "apiserver.crt", directory / "apiserver.key"
    cert_path.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca.public_bytes(serialization.Encoding.PEM).decode(), cert_path, key_path


class FakeKubeApi(LoopbackHttpServer):
    """`crds` maps a CRD name to its `FakeCrd`; `requests` records every path and its auth."""

    thread_name = "fake-kube-api"

    def __init__(self, directory: Path, token: str, *, key_identifiers: bool = True) -> None:
        super().__init__()
        self.ca_pem, self._cert, self._key = make_certificates(
            directory, key_identifiers=key_identifiers
        )
        self.state = _State(token=token)

    @property
    def crds(self) -> dict[str, FakeCrd]:
        return self.state.crds

    @property
    def requests(self) -> list[Seen]:
        return self.state.requests

    def start(self) -> Self:
        server = ThreadingHTTPServer((HOST, 0), _handler(self.state))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._cert, self._key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        return self._serve(server)

    @property
    def endpoint(self) -> str:
        """What GKE's `endpoint` output would be for this API: host[:port], no scheme."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.endpoint}"


def write_auth_plugin(directory: Path, token: str) -> Path:
    """An executable `gke-gcloud-auth-plugin` in `directory` that prints an ExecCredential with
    `token` and appends its argv and KUBERNETES_EXEC_INFO to `plugin.log` there."""
    (directory / "token").write_text(token)
    expiry = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    script = f"""#!{sys.executable}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "plugin.log"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:],
                          "exec_info": os.environ.get("KUBERNETES_EXEC_INFO")}}) + "\\n")
token = open(os.path.join(here, "token")).read()
print(json.dumps({{"kind": "ExecCredential", "apiVersion": "{EXEC_API_VERSION}",
                  "spec": {{"interactive": False}},
                  "status": {{"expirationTimestamp": "{expiry}", "token": token}}}}), end="")
"""
    path = directory / "gke-gcloud-auth-plugin"
    path.write_text(script)
    path.chmod(0o755)
    return path
