"""The CRDs GKE would have installed, for the Kubernetes layer's API server.

Two come from their projects' Go modules (never copied in): SecretProviderClass from the Secrets
Store CSI driver (`sigs.k8s.io/secrets-store-csi-driver` v1.5.3, `config/crd/bases/`, pinned in
tests/support/csi_crds) and PodMonitoring from Managed Service for Prometheus
(tests/support/gmp_crds.py). The proxy refuses the ComputeClass API module, so the ComputeClass CRD
is the project's own picture, written from GKE's reference and that API's Go types
(tests/support/compute_class_crd.py; docs/testing.md, "The Kubernetes layer").
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support import compute_class_crd, gmp_crds
from tests.support.promql import go_command

CSI_MODULE = "sigs.k8s.io/secrets-store-csi-driver"
CSI_SOURCE = Path(__file__).resolve().parent / "csi_crds"


@functools.cache
def csi_module_dir() -> Path:
    """The pinned CSI driver module in the module cache, downloaded and hash-checked once."""
    go = go_command("to download the Secrets Store CSI driver's CRDs (tests/support/csi_crds)")
    done = subprocess.run(
        [go, "mod", "download", "-json", CSI_MODULE],
        cwd=CSI_SOURCE,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
        capture_output=True,
        text=True,
        check=False,
        timeout=gmp_crds.DOWNLOAD_TIMEOUT,
    )
    info = json.loads(done.stdout) if done.stdout.strip() else {"Error": done.stderr.strip()}
    if done.returncode or info.get("Error"):
        raise RuntimeError(
            f"go mod download {CSI_MODULE} (tests/support/csi_crds) failed: {info['Error']}"
        )
    return Path(info["Dir"])


def secret_provider_class_crd() -> dict[str, Any]:
    path = (
        csi_module_dir()
        / "config"
        / "crd"
        / "bases"
        / "secrets-store.csi.x-k8s.io_secretproviderclasses.yaml"
    )
    found: dict[str, Any] = yaml.safe_load(path.read_text())
    return found


def gke_crds() -> list[dict[str, Any]]:
    """Every CRD the GKE stack's objects need: the two its projects publish and the project's
    own ComputeClass picture (its current version)."""
    return [secret_provider_class_crd(), gmp_crds.crd("podmonitorings"), compute_class_crd.crd()]
