"""The GKE backend's Kubernetes objects for the XLA compile cache (components/compile_cache.py).

An init container restores it and a sidecar saves it, with the VM path's tool and key; the
generation is the pinned image's digest, so nothing waits for the kubelet's image ID.
"""

from __future__ import annotations

import copy
from typing import Any

import pulumi

from components import remote_scripts
from components.config import WorkloadSections
from components.gke import pod_resources, pod_security
from components.gke.k8s_manifests import (
    SCRIPTS_DIR,
    VLLM_CACHE_DIR,
    PodExtras,
)

CACHE_WORK_DIR = "/var/lib/tpu-vllm/xla-cache"
#: The VM path's LOCAL_CACHE_DIR as the container sees it.
CACHE_DIR = f"{VLLM_CACHE_DIR}/xla_cache"
RESTORE_CONTAINER = "xla-cache-restore"
SAVE_CONTAINER = "xla-cache-save"
#: The last save, on SIGTERM: inside the pod's 30 s of grace, with room for the last request.
STOP_SAVE_SECONDS = 20


def cache_script_files() -> dict[str, str]:
    """The VM path's node tool (a ConfigMap key is a file name) and the two GKE steps."""
    return {
        **{
            name: remote_scripts.REMOTE.joinpath(name).read_text()
            for name in remote_scripts.XLA_CACHE_MODULES
        },
        "cache_restore.sh": remote_scripts.HEADER
        + remote_scripts.REMOTE.joinpath("gke_cache_restore.sh").read_text(),
        "cache_save.sh": remote_scripts.HEADER
        + remote_scripts.REMOTE.joinpath("gke_cache_save.sh").read_text(),
    }


def _limits() -> dict[str, Any]:
    return {
        "resources": copy.deepcopy(pod_resources.CACHE_CONTAINER),
        "securityContext": dict(pod_security.SERVER_CONTAINER),
    }


def compile_cache_extras(
    config: WorkloadSections, image: pulumi.Input[str], prefix: str, timeout_seconds: int
) -> PodExtras:
    """The sidecar saves once the server is ready, every `cache.saveInterval`, and at the end."""
    env = [
        {"name": "TOOLS", "value": SCRIPTS_DIR},
        {"name": "CACHE_PREFIX", "value": prefix},
        {"name": "CACHE_WORK", "value": CACHE_WORK_DIR},
        {"name": "CACHE_DIR", "value": CACHE_DIR},
        {"name": "CACHE_TIMEOUT", "value": str(timeout_seconds)},
    ]
    mounts = [
        {"name": "vllm-cache", "mountPath": VLLM_CACHE_DIR},
        {"name": "xla-cache-work", "mountPath": CACHE_WORK_DIR},
        {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
    ]
    restore = {
        "name": RESTORE_CONTAINER,
        "image": image,
        "command": ["bash", f"{SCRIPTS_DIR}/cache_restore.sh"],
        "env": [
            *env,
            {"name": "SERVER_IMAGE", "value": image},
        ],
        "volumeMounts": mounts,
        **_limits(),
    }
    save = {
        "name": SAVE_CONTAINER,
        "image": image,
        "command": ["bash", f"{SCRIPTS_DIR}/cache_save.sh"],
        "env": [
            *env,
            {"name": "SERVER_PORT", "value": str(config.vllm.port)},
            {"name": "CACHE_SAVE_EVERY", "value": str(config.cache.save_interval_seconds)},
            {"name": "CACHE_STOP_TIMEOUT", "value": str(STOP_SAVE_SECONDS)},
        ],
        "volumeMounts": mounts,
        **_limits(),
    }
    return PodExtras(
        init_containers=(restore,),
        sidecars=(save,),
        volumes=({"name": "xla-cache-work", "emptyDir": {}},),
        annotations={"tpu-vllm/compile-cache": prefix},
    )
