"""The XLA compile cache carried across TPU lifetimes in a per-stack Cloud Storage bucket.

A flex-start node is deleted with its disk when its run ends, so without it every renewed TPU
compiles again (685 s of an 857 s cold start on v5e-1) while it bills. The node restores and saves
`gs://BUCKET/xla-cache/KEY/GENERATION/` (scripts/remote/xla_cache.py); KEY is known at preview,
GENERATION is the image digest. Why and how: docs/compile-cache.md, "Warm starts on fresh nodes".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components.config import ServerSections
from components.naming import resource_id, stack_labels

#: Bumped when the meaning of the key or the layout changes: old generations then go unused.
KEY_SCHEMA = "tpu-vllm-xla-cache-v1"
#: The cache's folder in the bucket (a shared bucket may hold other things).
FOLDER = "xla-cache"
#: Generations whose objects nobody restored or saved for this many days are deleted.
UNUSED_DAYS = 30
#: The node's role on the bucket: objects only, no IAM or bucket administration.
WRITER_ROLE = "roles/storage.objectUser"
#: The cache directory as the server sees it, the same on every node of both backends: JAX before
#: 0.11.0 keys entries on it (docs/compile-cache.md, "The same path everywhere").
CONTAINER_CACHE_DIR = "/root/.cache/vllm/xla_cache"
#: Where things live on the node (`~` expands to the SSH user's home).
LOCAL_CACHE_DIR = "~/.cache/vllm/xla_cache"
NODE_WORK_DIR = "~/.tpu-vllm/xla-cache"
NODE_TOOL = "~/.tpu-vllm/xla_cache.py"
#: The readiness result's `cache` when there is none (disabled, or not known yet).
NO_CACHE: dict[str, Any] = {
    "restored": False,
    "files": 0,
    "bytes": 0,
    "seconds": 0.0,
    "generation": "",
    "reason": "",
}


def key_material(config: ServerSections) -> dict[str, Any]:
    """What the cache key hashes: everything known at preview that changes compiled programs
    (unknown `extraArgs` flags are assumed to). The port, the parsers and the timeouts change
    none, so they are left out; the image is keyed by its digest (the generation)."""
    vllm = config.vllm
    return {
        "schema": KEY_SCHEMA,
        "accelerator_type": config.tpu.chip.accelerator_type,
        "tensor_parallel_size": vllm.tensor_parallel_size,
        "model": config.model.id,
        "dtype": vllm.dtype,
        "kv_cache_dtype": vllm.kv_cache_dtype,
        "max_model_len": vllm.max_model_len,
        "max_num_batched_tokens": vllm.max_num_batched_tokens,
        "gpu_memory_utilization": vllm.gpu_memory_utilization,
        "enable_prefix_caching": vllm.enable_prefix_caching,
        "limit_mm_per_prompt": dict(vllm.limit_mm_per_prompt or ()),
        "extra_args": list(vllm.extra_args),
    }


def cache_key(config: ServerSections) -> str:
    text = json.dumps(key_material(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bucket_name(config: ServerSections) -> str:
    """`cache.bucket`, else the per-stack bucket's name, known at preview; bucket names are
    global, so the project's hash is in it."""
    if config.cache.bucket:
        return config.cache.bucket
    suffix = hashlib.sha256(config.project.encode()).hexdigest()[:8]
    return f"{resource_id(config.stack)}-xla-{suffix}"


def cache_prefix(config: ServerSections, bucket: str | None = None) -> str:
    return f"gs://{bucket or bucket_name(config)}/{FOLDER}/{cache_key(config)}/"


def compile_cache_output(config: ServerSections) -> str:
    return cache_prefix(config) if config.cache.enabled else ""


def generation_name(image_digest: str) -> str:
    """`img-` + 16 hex of an image digest; scripts/remote/xla_cache.py has the same function."""
    hexdigest = image_digest.rsplit(":", 1)[-1].lower()
    if len(hexdigest) < 16 or any(c not in "0123456789abcdef" for c in hexdigest):
        hexdigest = hashlib.sha256(image_digest.encode()).hexdigest()
    return f"img-{hexdigest[:16]}"


def cache_result(raw: Any) -> dict[str, Any]:
    """The readiness result's `cache`, with every field present (outputs are never None)."""
    result = dict(NO_CACHE)
    if isinstance(raw, dict):
        result.update({k: v for k, v in raw.items() if k in NO_CACHE and v is not None})
    return result


@dataclass(frozen=True, kw_only=True)
class CompileCacheArgs:
    """What the cache reads: where it lives, and who may write it."""

    project: str
    stack: str
    #: `cache.bucket`, or the per-stack bucket's name (`bucket_name`).
    bucket_name: str
    #: `gs://BUCKET/xla-cache/KEY/` (`cache_prefix`).
    prefix: str
    #: Whether to create the bucket: no when `cache.bucket` names one.
    create_bucket: bool
    #: The created bucket's location: the first candidate zone's region.
    region: str
    #: The node's identity, the only one granted write access.
    service_account_email: pulumi.Input[str]

    @classmethod
    def of(
        cls, config: ServerSections, service_account_email: pulumi.Input[str]
    ) -> CompileCacheArgs:
        bucket = bucket_name(config)
        return cls(
            project=config.project,
            stack=config.stack,
            bucket_name=bucket,
            prefix=cache_prefix(config, bucket),
            create_bucket=not config.cache.bucket,
            region=config.tpu.zones[0].rsplit("-", 1)[0].upper(),
            service_account_email=service_account_email,
        )


class CompileCache(pulumi.ComponentResource):
    """The bucket (unless `cache.bucket` names one) and the node's access to it.

    GCS keeps no last-read time, so every save sets `customTime` and the lifecycle rule deletes
    by `daysSinceCustomTime`: `age` counts from creation and would delete a cache in daily use.
    """

    bucket_name: str
    prefix: str

    def __init__(
        self, name: str, args: CompileCacheArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tpu-vllm:index:CompileCache", name, None, opts)
        self.bucket_name = args.bucket_name
        self.prefix = args.prefix
        child = pulumi.ResourceOptions(parent=self)
        self.bucket: gcp.storage.Bucket | None = None
        bucket_ref: pulumi.Input[str] = self.bucket_name
        if args.create_bucket:
            self.bucket = self._create_bucket(name, args, child)
            bucket_ref = self.bucket.name
        member = pulumi.Output.from_input(args.service_account_email).apply(
            lambda email: f"serviceAccount:{email}"
        )
        self.writer = gcp.storage.BucketIAMMember(
            f"{name}-node-writer",
            bucket=bucket_ref,
            role=WRITER_ROLE,
            member=member,
            opts=child,
        )
        self.register_outputs({"bucket_name": self.bucket_name, "prefix": self.prefix})

    def _create_bucket(
        self, name: str, args: CompileCacheArgs, child: pulumi.ResourceOptions
    ) -> gcp.storage.Bucket:
        return gcp.storage.Bucket(
            f"{name}-bucket",
            name=self.bucket_name,
            project=args.project,
            location=args.region,
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            # The cache is disposable: `pulumi destroy` must not stop at a non-empty bucket.
            force_destroy=True,
            labels=stack_labels(args.stack),
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        days_since_custom_time=UNUSED_DAYS,
                        matches_prefixes=[f"{FOLDER}/"],
                    ),
                )
            ],
            opts=child,
        )
