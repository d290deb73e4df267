"""A loopback fake of the Kubernetes API's Deployment read, as the GKE readiness Job makes it.

`GET /apis/apps/v1/namespaces/NS/deployments/NAME` answers an apps/v1 Deployment built from a
scripted list of `Rollout` states: each read serves the next state, and the last one stays. What
it copies from the real API server and controllers:

- The object's shape (Kubernetes API reference, apps/v1 Deployment; k8s.io/api `apps/v1`
  `DeploymentStatus`): metadata with `generation` and `managedFields` (whose `fieldsV1` name the
  status `f:status`), spec with `replicas`, status with `observedGeneration` and the replica
  counts, zero counts left out (the status fields are `omitempty`).
- Indented JSON for a client whose User-Agent starts with `curl` (the API server's
  `isPrettyPrint`, apiserver `pkg/endpoints/handlers/negotiation`: `json.Indent` with two
  spaces), compact otherwise.
- 401 without `Authorization: Bearer TOKEN`; 403 and 404 as `metav1.Status` objects, with the
  message apimachinery's `NewForbidden` and `NewNotFound` write.
- `recreate_update(...)`: the states a `Recreate` update of N replicas goes through, as the
  deployment controller writes them (kubernetes `pkg/controller/deployment/recreate.go`
  `rolloutRecreate`, `sync.go` `calculateStatus`): the new generation not yet observed; the old
  ReplicaSet scaled to 0 while its pods terminate (terminating pods are not counted); the new
  ReplicaSet's pods created only once no old pod runs (`oldPodsRunning`), Pending; then Ready.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.loopback import HOST, LoopbackHttpServer


@dataclass(frozen=True)
class Rollout:
    """What one read of the Deployment shows."""

    generation: int
    observed: int
    spec_replicas: int
    replicas: int = 0
    updated: int = 0
    ready: int = 0


def recreate_update(replicas: int, generation: int = 2) -> list[Rollout]:
    """An update to `generation` of a Recreate Deployment whose old pods all served."""
    old = generation - 1
    return [
        # The spec changed; the controller's status still describes the old generation.
        Rollout(generation, old, replicas, replicas, replicas, replicas),
        # Observed: the old ReplicaSet scaled to 0, its pods terminating (and still answering).
        Rollout(generation, generation, replicas),
        # No old pod runs: the new ReplicaSet's pods are created, Pending (capacity, start).
        Rollout(generation, generation, replicas, replicas, replicas, 0),
        # One new pod Ready.
        Rollout(generation, generation, replicas, replicas, replicas, 1),
    ]


def deployment_object(namespace: str, name: str, state: Rollout) -> dict[str, Any]:
    counts = {
        "observedGeneration": state.observed,
        "replicas": state.replicas,
        "updatedReplicas": state.updated,
        "readyReplicas": state.ready,
        "availableReplicas": state.ready,
        "unavailableReplicas": state.spec_replicas - state.ready,
    }
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "0b0e6c2a-7d1e-4c1b-9f3e-5a8d2c4e6f10",
            "resourceVersion": str(1000 + state.generation * 10 + state.ready),
            "generation": state.generation,
            "annotations": {"deployment.kubernetes.io/revision": str(state.observed)},
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "apps/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:replicas": {}, "f:updatedReplicas": {}}},
                    "subresource": "status",
                }
            ],
        },
        "spec": {
            "replicas": state.spec_replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/component": "server"}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/component": "server"}}},
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {
            **{key: value for key, value in counts.items() if value},  # omitempty
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "ReplicaSetUpdated",
                    "message": f'ReplicaSet "{name}-5d8f7c9b4" is progressing.',
                }
            ],
        },
    }


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeDeploymentApi(LoopbackHttpServer):
    """Serves one Deployment; `states` advance one per read. `forbidden` answers 403."""

    thread_name = "fake-kube-api"

    def __init__(
        self,
        namespace: str,
        name: str,
        token: str,
        states: list[Rollout],
        on_read: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        self.namespace, self.name, self.token = namespace, name, token
        self.states = states
        self.forbidden = False
        #: Called with the index of the state about to be served, before it is sent.
        self.on_read = on_read
        #: (index of the state served, User-Agent) per successful read.
        self.served: list[tuple[int, str]] = []
        self._lock = threading.Lock()

    def start(self) -> FakeDeploymentApi:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = fake.answer(self.path, dict(self.headers.items()))
                agent = self.headers.get("User-Agent", "")
                indent = 2 if agent.startswith("curl") else None
                data = json.dumps(body, indent=indent).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return self._serve(ThreadingHTTPServer((HOST, 0), Handler))

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, Any]:
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        if auth != f"Bearer {self.token}":
            return 401, status_object(401, "Unauthorized", "Unauthorized")
        want = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.name}"
        if path.split("?", maxsplit=1)[0] != want:
            return 404, status_object(
                404, "NotFound", "the server could not find the requested resource"
            )
        if self.forbidden:
            user = f"system:serviceaccount:{self.namespace}:vllm"
            return 403, status_object(
                403,
                "Forbidden",
                f'deployments.apps "{self.name}" is forbidden: User "{user}" cannot get '
                f'resource "deployments" in API group "apps" in the namespace "{self.namespace}"',
            )
        agent = next((v for k, v in headers.items() if k.lower() == "user-agent"), "")
        with self._lock:
            index = min(len(self.served), len(self.states) - 1)
            self.served.append((index, agent))
        if self.on_read is not None:
            self.on_read(index)
        return 200, deployment_object(self.namespace, self.name, self.states[index])
