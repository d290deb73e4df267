"""gcp stand-in: Cloud Storage (`storage.Bucket`, `storage.BucketIAMMember`).

Imitates hashicorp/terraform-provider-google-beta `google-beta/services/storage/
resource_storage_bucket.go` and `iam_storage_bucket.go`, as pulumi-gcp 10.2.0 bridges them
(`provider/resources.go`: `name` autonamed up to 222 characters):
- Bucket: ForceNew `name`, `location` (kept upper-case, its `StateFunc`), `project`,
  `hierarchical_namespace`; `storage_class` default STANDARD, `force_destroy` default false; id
  the name, `selfLink` `https://www.googleapis.com/storage/v1/b/{name}`, `url` `gs://{name}`;
  a bucket that still holds objects is not deleted without `force_destroy` ("Error trying to
  delete bucket X without `force_destroy` set to true");
- BucketIAMMember: `bucket` ForceNew, compared by name (`StorageBucketDiffSuppress`), the
  policy's resource id `b/{bucket}`.

Where objects live: when TPU_VLLM_STANDIN_GCS_ROOT names the directory of the loopback bucket
store (tests/support/fakes/gcs_store.py, what the fake `gcloud storage` and the JSON API fake
serve), a created bucket is a directory there, so the node's cache tool finds it; delete removes it
(with its objects only under `force_destroy`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tests.support.standins.gcp_common import (
    IamMember,
    label_outputs,
    not_found,
    now,
    project_number,
    read_stored,
)
from tests.support.standins.kinds import ApiError, Context, Kind, fixed, last_segment
from tests.support.standins.store import Store
from tests.support.standins.values import Plain

GCS_ROOT_ENV = "TPU_VLLM_STANDIN_GCS_ROOT"
STORAGE_V1 = "https://www.googleapis.com/storage/v1/b/"


def bucket_dir(name: str) -> Path | None:
    root = os.environ.get(GCS_ROOT_ENV, "").strip()
    return Path(root) / name if root else None


def bucket_exists(name: str) -> bool:
    directory = bucket_dir(name)
    return Store("storage_buckets").get(name) is not None or bool(directory and directory.is_dir())


class Bucket(Kind):
    token = "gcp:storage/bucket:Bucket"
    replace_on = frozenset(["name", "location", "project", "hierarchicalNamespace"])
    computed = frozenset(
        [
            "project",
            "uniformBucketLevelAccess",
            "rpo",
            "publicAccessPrevention",
            "softDeletePolicy",
            "deletionPolicy",
        ]
    )
    from_provider = fixed(project="project")
    defaults = fixed(forceDestroy=False, storageClass="STANDARD")
    autoname = ("name", 222)

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "location":
            return str(old).upper() == str(new).upper()
        return super().same(prop, old, new)

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        project = ctx.project(inputs)
        name = inputs["name"]
        outputs = {
            **inputs,
            **label_outputs(inputs),
            "project": project,
            "location": str(inputs["location"]).upper(),
            "selfLink": STORAGE_V1 + name,
            "url": f"gs://{name}",
            "projectNumber": int(project_number(project)),
            "uniformBucketLevelAccess": bool(inputs.get("uniformBucketLevelAccess")),
            "publicAccessPrevention": inputs.get("publicAccessPrevention") or "inherited",
            "rpo": inputs.get("rpo") or "DEFAULT",
            "timeCreated": now(),
            "updated": now(),
        }
        if bucket_exists(name) or not Store("storage_buckets").insert(name, outputs):
            raise ApiError(
                "googleapi: Error 409: Your previous request to create the named bucket "
                "succeeded and you already own it., conflict"
            )
        directory = bucket_dir(name)
        if directory is not None:
            directory.mkdir(parents=True)
        return name, outputs

    def read(self, ctx: Context, resource_id: str, state: Plain) -> Plain | None:
        return read_stored("storage_buckets", resource_id, state)

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        store = Store("storage_buckets")
        if store.get(resource_id) is None:
            raise not_found(f"The bucket '{resource_id}'")
        outputs = {
            **olds,
            **news,
            **label_outputs(news),
            "location": olds["location"],
            "updated": now(),
        }
        outputs["project"] = olds["project"]
        store.put(resource_id, outputs)
        return outputs

    def delete(self, ctx: Context, resource_id: str, state: Plain) -> None:
        if state.get("deletionPolicy") == "ABANDON":
            return
        directory = bucket_dir(resource_id)
        if directory is not None and directory.is_dir():
            if any(directory.iterdir()) and not state.get("forceDestroy"):
                raise ApiError(
                    f"Error trying to delete bucket {resource_id} without `force_destroy` set "
                    "to true"
                )
            shutil.rmtree(directory)
        Store("storage_buckets").delete(resource_id)


class BucketIamMember(IamMember):
    token = "gcp:storage/bucketIAMMember:BucketIAMMember"
    parent = "bucket"

    def same(self, prop: str, old: Any, new: Any) -> bool:
        if prop == "bucket":
            return last_segment(old) == last_segment(new)
        return super().same(prop, old, new)

    def resource_id(self, ctx: Context, inputs: Plain) -> str:
        return f"b/{last_segment(inputs['bucket'])}"

    def require_parent(self, ctx: Context, resource_id: str) -> None:
        if not bucket_exists(last_segment(resource_id)):
            raise not_found(f"The bucket '{last_segment(resource_id)}'")
