"""Just enough of a Kubernetes API client to read objects as the deployer, from the program's
kubeconfig: TLS against the cluster's CA, a bearer token from the kubeconfig's exec plugin.

Not the `kubernetes` package: a few reads need only client-go's exec protocol. The token stays in
memory and the `Authorization` header: never in argv, an error, a log line or an output.
Sources: docs/gke.md "How the program reads the cluster".
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

#: How long one request may take; the callers' own bounds (minutes) are far longer.
REQUEST_TIMEOUT_SECONDS = 30
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
PLUGIN_TIMEOUT_SECONDS = 120


class KubeApiError(Exception):
    """The API or the credential plugin refused; waiting will not change it."""


class Unreachable(Exception):
    """No answer or a 5xx, as a new cluster's control plane gives for a while: keep trying."""


class Throttled(Exception):
    """429: come back after `Retry-After`, as client-go does."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    """As client-go reads it: whole seconds only."""
    try:
        seconds = int(value or "")
    except ValueError:
        return None
    return float(seconds) if seconds >= 0 else None


def tls_context(ca_pem: str | None) -> ssl.SSLContext:
    """The kubeconfig's CA and the host name, as kubectl checks them, without Python 3.13's
    `VERIFY_X509_STRICT`, which refuses older GKE clusters' certificates (urllib3 #3614)."""
    context = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


@dataclass(frozen=True)
class ExecPlugin:
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api_version: str
    provide_cluster_info: bool


@dataclass(frozen=True)
class KubeTarget:
    """A kubeconfig's current context."""

    server: str
    ca_data: str  # base64 of the PEM
    plugin: ExecPlugin

    @property
    def ca_pem(self) -> str | None:
        return base64.b64decode(self.ca_data).decode() if self.ca_data else None


def _named(items: Any, name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return dict(item.get(what) or {})
    raise KubeApiError(f"the kubeconfig has no {what} named {name!r}")


def parse_kubeconfig(text: str) -> KubeTarget:
    config = yaml.safe_load(text) or {}
    context = _named(config.get("contexts"), str(config.get("current-context")), "context")
    cluster = _named(config.get("clusters"), str(context.get("cluster")), "cluster")
    user = _named(config.get("users"), str(context.get("user")), "user")
    exec_ = user.get("exec")
    if not isinstance(exec_, dict) or not exec_.get("command"):
        raise KubeApiError("the kubeconfig's user has no exec credential plugin")
    plugin = ExecPlugin(
        command=str(exec_["command"]),
        args=tuple(str(a) for a in exec_.get("args") or ()),
        env=tuple((str(e["name"]), str(e["value"])) for e in exec_.get("env") or ()),
        api_version=str(exec_.get("apiVersion") or "client.authentication.k8s.io/v1beta1"),
        provide_cluster_info=bool(exec_.get("provideClusterInfo")),
    )
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise KubeApiError(f"the kubeconfig's server {server!r} is not an https:// address")
    return KubeTarget(server, str(cluster.get("certificate-authority-data") or ""), plugin)


def _expiry(stamp: Any) -> float | None:
    """Epoch seconds of an RFC 3339 `expirationTimestamp`; None if absent."""
    if not stamp:
        return None
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


@dataclass
class KubeApi:
    """JSON from the cluster's API, as the kubeconfig's user."""

    target: KubeTarget
    _token: str | None = field(default=None, repr=False)
    _expires: float | None = field(default=None, repr=False)

    def _exec_info(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self.target.plugin.provide_cluster_info:
            spec["cluster"] = {
                "server": self.target.server,
                "certificate-authority-data": self.target.ca_data,
            }
        info = {"apiVersion": self.target.plugin.api_version, "kind": "ExecCredential"}
        return json.dumps({**info, "spec": spec})

    def _refresh_token(self) -> str:
        plugin = self.target.plugin
        env = {**os.environ, **dict(plugin.env), EXEC_INFO_ENV: self._exec_info()}
        try:
            done = subprocess.run(
                [plugin.command, *plugin.args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=None,  # its messages reach the operator, as with kubectl
                timeout=PLUGIN_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            raise KubeApiError(
                f"the credential plugin {plugin.command} is not on PATH. Fix: "
                "`gcloud components install gke-gcloud-auth-plugin`"
            ) from None
        if done.returncode != 0:
            raise KubeApiError(
                f"the credential plugin {plugin.command} exited with status {done.returncode} "
                "(its message is above). Fix: `gcloud auth login`, then retry"
            )
        try:
            credential = json.loads(done.stdout)
            status = credential["status"]
            token = str(status["token"])
        except (ValueError, KeyError, TypeError):
            raise KubeApiError(
                f"the credential plugin {plugin.command} printed no ExecCredential with a token"
            ) from None
        if credential.get("apiVersion") != plugin.api_version:
            raise KubeApiError(
                f"the credential plugin {plugin.command} answered {credential.get('apiVersion')}"
                f", not the kubeconfig's {plugin.api_version}"
            )
        self._token, self._expires = token, _expiry(status.get("expirationTimestamp"))
        return token

    def _bearer(self) -> str:
        if self._token is None or (self._expires is not None and time.time() >= self._expires):
            return self._refresh_token()
        return self._token

    def _request(self, path: str, token: str, body: Any = None) -> tuple[int, Any, float | None]:
        """(status, JSON body, Retry-After) of a GET, or a POST of `body`."""
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(  # noqa: S310 - https only (parse_kubeconfig)
            self.target.server.rstrip("/") + path, data=data, headers=headers
        )
        try:
            with urllib.request.urlopen(  # noqa: S310 - https only (parse_kubeconfig)
                request, timeout=REQUEST_TIMEOUT_SECONDS, context=tls_context(self.target.ca_pem)
            ) as answer:
                return int(answer.status), json.loads(answer.read() or b"null"), None
        except urllib.error.HTTPError as error:
            body, wait = error.read(), _retry_after(error.headers.get("Retry-After"))
            try:
                return int(error.code), json.loads(body or b"null"), wait
            except ValueError:  # the throttling filters answer plain text
                return int(error.code), None, wait
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise KubeApiError(
                    f"{self.target.server} presented a certificate the kubeconfig's CA does not "
                    f"verify ({reason.verify_message})"
                ) from None
            raise Unreachable(f"{self.target.server} did not answer ({reason})") from None

    def get(self, path: str) -> tuple[int, Any]:
        """(HTTP status, JSON body); after a 401 the plugin runs again once, as in client-go."""
        return self._answer(path, None)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        """As `get`, for a POST with a JSON body."""
        return self._answer(path, body)

    def _answer(self, path: str, sent: Any) -> tuple[int, Any]:
        status, body, wait = self._request(path, self._bearer(), sent)
        if status == 401:
            status, body, wait = self._request(path, self._refresh_token(), sent)
        if status == 429:
            after = "" if wait is None else f", Retry-After {wait:.0f} s"
            raise Throttled(f"{self.target.server} answered 429 Too Many Requests{after}", wait)
        if status >= 500:
            raise Unreachable(f"{self.target.server} answered {status} for {path}")
        return status, body


def status_message(body: Any) -> str:
    """The `message` of a Kubernetes Status answer, else ""."""
    return str(body.get("message") or "") if isinstance(body, dict) else ""
