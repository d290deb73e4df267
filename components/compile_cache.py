"""The XLA compile cache carried across TPU lifetimes in a per-stack Cloud Storage bucket.

Why: 685 s of seed 000's 857 s cold start is XLA compilation. The `~/.cache/vllm` mount saves it
on a restart of the same VM (497 s), but a flex-start node is deleted with its disk when its run
ends, so every renewed TPU compiles again while it is billed. So the node restores the cache from
Cloud Storage before `docker run` and saves what is new after `Application startup complete.`,
again every `cache.saveInterval` and when the server stops (docs/compile-cache.md, "When the
node saves"); saves running at once are safe beside each other (generation preconditions).

What is cached: vLLM's `VLLM_XLA_CACHE_PATH` (default `~/.cache/vllm/xla_cache`, vllm
`envs.py`), where tpu-inference points JAX's persistent compilation cache. JAX's own cache key
(`jax/_src/cache_key.py`) covers the program, the jaxlib/libtpu versions, the XLA flags, the
compile options and the device topology, and no host name: an entry made on one VM serves
another VM of the same TPU type with the same image and the same vLLM arguments. JAX's docs
allow a `gs://` cache directory (and recommend Cloud Storage FUSE for it); the node copies the
cache to local disk instead (docs/compile-cache.md, "Why a copy on local disk": no GCS round
trip per lookup while it compiles, only complete, image-pinned generations; the design notes
record that a direct read did not hit). JAX runs what the cache holds: only the node may write
to the bucket.

Layout: `gs://BUCKET/xla-cache/KEY/GENERATION/`.
- KEY (`cache_key`) hashes what the program knows at preview: the accelerator type, the
  tensor-parallel size and every flag that changes compiled shapes. `cache_prefix` is the
  `compile_cache` output; it changes exactly when one of those changes.
- GENERATION (`generation_name`, computed on the VM by scripts/remote/xla_cache.py) is the
  image digest, resolved after the pull because `nightly` moves. The node only ever restores the
  generation of the digest it is about to run: an incompatible cache is never restored, and a
  changed key or image starts cold and writes a new generation.

The bucket (`CompileCache`): uniform bucket-level access, public access prevention enforced,
writable only by the node's service account (plus project owners, who cannot be excluded), and
a lifecycle rule deleting generations unused for 30 days (see `UNUSED_DAYS`).

This module is shared: the GKE backend reuses `cache_key`, `cache_prefix`, `bucket_name` and
`CompileCache`, and the node tool scripts/remote/xla_cache.py for restore and save.
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
#: Objects live under this folder of the bucket (a shared bucket may hold other things).
FOLDER = "xla-cache"
#: Generations whose objects nobody restored or saved for this many days are deleted.
UNUSED_DAYS = 30
#: The node's role on the bucket: read, create, overwrite and update (custom time) objects;
#: no IAM or bucket administration.
WRITER_ROLE = "roles/storage.objectUser"
#: The cache directory as the server sees it: the same absolute path on every node and on both
#: backends (the VM mounts `~/.cache/vllm` there, the GKE pods an emptyDir). JAX before 0.11.0
#: hashes it into every entry's key: jax/_src/compiler.py sets the per-fusion autotune cache
#: dir (`xla_gpu_per_fusion_autotune_cache_dir`) to a path under the cache directory in the
#: compile options' debug options, which jax/_src/cache_key.py hashes, so entries restored
#: under another path would never hit. From jax 0.11.0 (commit ad707df0f9) that field is
#: cleared first; tpu-inference pins jax==0.11.0, so the image's JAX no longer keys on the
#: path. It stays fixed anyway: cheap insurance for an older image (the image's JAX moves with
#: `nightly`), and it is vLLM's default VLLM_XLA_CACHE_PATH (`~/.cache/vllm/xla_cache`) for
#: root, the image's user.
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
    """What the cache key hashes: everything known at preview that changes compiled programs.

    In: the accelerator type (the device topology JAX keys on), the tensor-parallel size, the
    model, and the flags that set shapes or the programs: dtype, KV-cache dtype, max-model-len,
    max-num-batched-tokens, gpu-memory-utilization (it sizes the KV cache arrays), prefix
    caching, the multimodal limits (encoder budget) and every `extraArgs` flag (unknown flags
    are assumed to matter). Out, on purpose: the port, the tool-call and reasoning parsers and
    the readiness timeout, which change no compiled program, so changing them keeps the cache.
    The image is keyed on the VM by its digest (the generation), not here by its tag.
    """
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
    """A short, stable hash of `key_material` (16 hex digits: 64 bits)."""
    text = json.dumps(key_material(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bucket_name(config: ServerSections) -> str:
    """`cache.bucket`, else the per-stack bucket's name: deterministic, so known at preview.

    Bucket names are global; the project's hash makes this one unique to the project.
    """
    if config.cache.bucket:
        return config.cache.bucket
    suffix = hashlib.sha256(config.project.encode()).hexdigest()[:8]
    return f"{resource_id(config.stack)}-xla-{suffix}"


def cache_prefix(config: ServerSections, bucket: str | None = None) -> str:
    """`gs://BUCKET/xla-cache/KEY/`: where this configuration's generations live."""
    return f"gs://{bucket or bucket_name(config)}/{FOLDER}/{cache_key(config)}/"


def compile_cache_output(config: ServerSections) -> str:
    """The `compile_cache` stack output: the prefix, or "" when the cache is disabled."""
    return cache_prefix(config) if config.cache.enabled else ""


def generation_name(image_digest: str) -> str:
    """A generation for an image digest (`repo@sha256:HEX` or `sha256:HEX`): `img-` + 16 hex.

    The same function runs on the VM (scripts/remote/xla_cache.py); tests pin the two together.
    """
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


@dataclass
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

    Lifecycle: a generation is *unused* when no node has restored or saved it. GCS keeps no
    last-read time, so the node's save (which runs after every start, warm or cold) sets each
    object's `customTime` to now, and the rule deletes objects whose custom time is
    `UNUSED_DAYS` days old (`daysSinceCustomTime`). Not `age`: it counts from creation, so a
    cache in daily use would be deleted every month and paid for again in TPU compile time.
    Not `daysSinceNoncurrentTime`: noncurrent means overwritten in a versioned bucket, not
    unused. Objects without a custom time (not written by the node) are never matched.
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
        # Near the TPU: the first candidate zone's region (zones are tried in that order).
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
