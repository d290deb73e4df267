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
- `rolling_update(...)`: the states a rolling update of N replicas with `maxSurge: 1`,
  `maxUnavailable: 0` goes through, as the deployment controller writes them (kubernetes
  `pkg/controller/deployment/rolling.go` `rolloutRolling`: `reconcileNewReplicaSet` scales the
  new ReplicaSet up to `replicas + maxSurge` pods in all (`deploymentutil.NewRSNewReplicas`),
  `scaleDownOldReplicaSetsForRollingUpdate` scales an old one down only while more than
  `replicas - maxUnavailable` pods are available; `sync.go` `calculateStatus` sums the
  ReplicaSets' status counts, and a ReplicaSet's status counts no terminating pod). So: the new
  generation not yet observed; one new pod beside the N old ones, not Ready (a node, a start,
  the startup probe); Ready, so one old pod goes and the next new one is created; and so on,
  until the last old pod goes once the N-th new one is Ready.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fakes.loopback import HOST, LoopbackHttpServer


@dataclass(frozen=True)
class Rollout:
    """What one read of the Deployment shows."""

    generation: int
    observed: int
    spec_replicas: int
    replicas: int = 0
    updated: int = 0
    ready: int = 0


def rolling_update(replicas: int, generation: int = 2) -> list[Rollout]:
    """An update to `generation` of the stack's Deployment (maxSurge 1, maxUnavailable 0) whose
    old pods all served, each new pod Ready only once its startup probe passed."""
    old = generation - 1
    states = [Rollout(generation, old, replicas, replicas, replicas, replicas)]
    for new in range(1, replicas + 1):
        olds = replicas - new + 1
        # The new ReplicaSet has `new` pods (the newest starting), beside `olds` old ones.
        states.append(Rollout(generation, generation, replicas, olds + new, new, olds + new - 1))
        # The newest is Ready: an old pod is scaled down (it terminates, no longer counted).
        states.append(Rollout(generation, generation, replicas, replicas, new, replicas))
    return states


def deployment_object(namespace: str, name: str, state: Rollout) -> dict[str, Any]:
    counts = {
        "observedGeneration": state.observed,
        "replicas": state.replicas,
        "updatedReplicas": state.updated,
        "readyReplicas": state.ready,
        "availableReplicas": state.ready,
        "unavailableReplicas": max(0, max(state.replicas, state.spec_replicas) - state.ready),
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
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
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
