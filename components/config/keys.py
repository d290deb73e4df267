"""Every config key of every section, with its meaning: the one table of tpu-vllm's keys.

The reader rejects any key not listed here, with a did-you-mean, so a typo (`maxModelLength`)
cannot silently fall back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping

NAMESPACE = "tpu-vllm"
KEYS: Mapping[str, Mapping[str, str]] = {
    "tpu": {
        "chip": "TPU slice: v5e-1, v5e-4, v5e-8, v6e-1, v6e-4, v6e-8 (or gcloud's v5litepod-N)",
        "zones": "candidate zones, tried in order",
        "provisioning": "flex-start | spot | on-demand",
        "maxRunDuration": "flex-start run limit, e.g. 4h, 90m, 2d (at most 7d)",
        "runtimeVersion": "TPU VM runtime; default from the catalog",
        "capacityWait": "how long one zone may queue for capacity before the next is tried",
    },
    "model": {
        "id": "Hugging Face model id",
        "weightsGiB": "weights resident in HBM; required for models not in the catalog",
    },
    "vllm": {
        "image": "serving image; a tag is pinned to its digest once (NAME@sha256:... as given)",
        "imageUpgrade": "a label; a new value resolves vllm.image's tag again (the upgrade)",
        "registryEndpoint": "where the digest lookup asks instead of the image's registry",
        "port": "serving port",
        "dtype": "--dtype",
        "kvCacheDtype": "--kv-cache-dtype",
        "maxModelLen": "--max-model-len",
        "maxNumBatchedTokens": "--max-num-batched-tokens",
        "tensorParallelSize": "--tensor-parallel-size; must equal the chip count",
        "gpuMemoryUtilization": "--gpu-memory-utilization, in (0, 1]",
        "enablePrefixCaching": "--enable-prefix-caching",
        "toolCallParser": "--tool-call-parser (implies --enable-auto-tool-choice)",
        "reasoningParser": "--reasoning-parser",
        "limitMmPerPrompt": "--limit-mm-per-prompt, an object such as {image: 4, audio: 1}",
        "extraArgs": "other vllm serve flags, verbatim",
        "readinessTimeout": (
            "how long a start may take: to 'Application startup complete.' (VM), to the "
            "model's answer (GKE)"
        ),
    },
    "access": {
        "allowedCidrs": "who may reach the serving port",
        "allowPublic": "must be true to allow 0.0.0.0/0",
        "sshCidrs": "who may reach port 22; default allowedCidrs",
        "hfTokenSecret": "Secret Manager secret holding the Hugging Face token",
        "allowUnverifiedHostKey": "connect without verifying the node's SSH host key",
        "network": "VPC network of the node and its firewall rules; default `default`",
    },
    "cost": {
        "hourlyUsd": "override of the catalog's hourly price for the whole slice",
    },
    "dns": {
        "managedZone": "an existing Cloud DNS managed zone in the project, for a stable name",
        "name": "the record's name inside that zone; default the stack name",
    },
    "gke": {
        "replicas": "how many TPU replicas serve behind the one address (backend gke), >= 1",
        "cluster": "an existing GKE cluster (NAME or projects/P/locations/L/clusters/NAME); "
        "unset: the stack creates one",
    },
    "renewal": {
        "lead": "how long before a flex-start run ends its successor is requested, e.g. 1h (on GKE "
        "the ComputeClass's nodeRecycling.leadTimeSeconds); shorter than tpu.maxRunDuration; "
        "default: a capacity wait plus a warm start",
        "drain": "how long a replaced node keeps serving after the DNS record moved to its "
        "successor; at least the record's TTL (60 s) with dns.* (VM backend)",
    },
    "cache": {
        "enabled": "carry the XLA compile cache across TPU lifetimes in Cloud Storage",
        "bucket": "an existing bucket for the cache instead of the per-stack one",
        "restoreTimeout": "how long a node may spend restoring the cache before starting cold",
        "minCompileSeconds": "JAX caches only compiles that took at least this long; "
        "default 0: every compile",
        "saveInterval": "how often the node saves new compile-cache entries after the save at "
        "ready, e.g. 5m; it also saves when the server stops",
    },
    "monitoring": {
        "enabled": "vLLM's /metrics to Cloud Monitoring, the container log to Cloud Logging, "
        "and the stack's dashboard; default true",
        "scrapeInterval": "how often /metrics is scraped (10s to 5m); default 30s",
        "uptimeCheck": "a Cloud Monitoring uptime check on /health (opens the serving port to "
        "Google's uptime-check addresses); default false",
        "notificationChannels": "projects/P/notificationChannels/ID list; alert policies exist "
        "only when it is set",
    },
}
