"""Fake `gcloud secrets versions access` and `gcloud storage`, behaving like gcloud on a TPU VM.

Real gcloud on the VM takes its identity from the metadata server and reads Secret Manager over
HTTPS, writing the payload to stdout. This does the same against the loopback fakes
(`GCE_METADATA_HOST`, `SECRET_MANAGER_API_ENDPOINT`), with gcloud's error wording and exit codes,
and records each call's argv and environment to `$FAKE_DOCKER_STATE/gcloud_invocations.jsonl`
so tests can prove no secret was passed in. Stdlib only: it runs under the system python3.

`gcloud storage cat|cp|rsync|objects update` work on a bucket kept in the local directory
`$FAKE_GCS_ROOT` (tests/support/fakes/gcs_store.py). Their behaviour follows the Cloud SDK sources
(googlecloudsdk/command_lib/storage/rsync_command_util.py): rsync needs an existing source
container ("Did not find existing container at: URL"), skips a file whose size and mtime
match (the mtime is kept in the object's metadata on upload and restored on download),
only descends into folders with --recursive, matches --exclude regexes against the path
relative to the source, and never copies empty folders; `cat`/`objects update` of nothing
fail with "The following URLs matched no objects or files". Faults (a 503 or a stall) are set
per operation (read, write, download, upload, touch) in `$FAKE_GCS_ROOT/faults.json`. The node
tool uses gcloud for its restore only (its save goes through the JSON API, with generation
preconditions: scripts/remote/xla_cache_gcloud.py), so `cp`'s `--if-generation-match`
(googlecloudsdk/command_lib/storage/flags.py `add_precondition_flags`) is not modelled.

An older Cloud SDK: `$FAKE_GCLOUD_STORAGE_COMMANDS` lists the `gcloud storage` commands this
"installation" has (e.g. `cat,cp`; `none` for an SDK without the `storage` group; unset: all).
Any other is refused as calliope refuses a command it does not know: `ERROR: (gcloud.storage)
Invalid choice: 'rsync'.`, suggestions, exit status 2 (googlecloudsdk/calliope/
parser_extensions.py: `message = "Invalid choice: '{0}'."`, then `self.exit(2, ...)`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

if __package__:  # imported by the tests
    from tests.support.fakes.gcs_store import GcsStore, StoreError
else:  # run as a script by bin/gcloud, from the harness's copy of tests/support/fakes
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gcs_store import GcsStore, StoreError  # type: ignore[import-not-found,no-redef]

COMMAND = "gcloud.secrets.versions.access"


def record(argv: list[str]) -> None:
    state = os.environ.get("FAKE_DOCKER_STATE")
    if state:
        with open(os.path.join(state, "gcloud_invocations.jsonl"), "a", encoding="utf-8") as log:
            entry = {"argv": ["gcloud", *argv], "env": dict(os.environ), "time": time.time()}
            log.write(json.dumps(entry) + "\n")


def fail(status: str, message: str) -> None:
    print(f"ERROR: ({COMMAND}) {status}: {message}", file=sys.stderr)
    raise SystemExit(1)


def get_json(url: str, headers: dict[str, str]) -> dict[str, object]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - loopback fakes
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return dict(json.load(response))


def storage_fail(command: str, message: str, code: int = 1) -> None:
    print(f"ERROR: (gcloud.storage.{command}) {message}", file=sys.stderr)
    raise SystemExit(code)


def split_url(url: str) -> tuple[str, str]:
    bucket, _, name = url[len("gs://") :].partition("/")
    return bucket, name


def local_tree(root: str, recursive: bool) -> dict[str, str]:
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        if not recursive:
            dirs[:] = []
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                found[os.path.relpath(path, root).replace(os.sep, "/")] = path
    return found


def storage_rsync(store: GcsStore, flags: dict[str, str], source: str, dest: str) -> None:
    recursive = "recursive" in flags or "r" in flags or "R" in flags
    exclude = re.compile(flags["exclude"]) if flags.get("exclude") else None
    copied = total = 0
    if source.startswith("gs://") and not dest.startswith("gs://"):
        store.apply_fault("download")
        bucket, prefix = split_url(source)
        names = store.names(bucket, prefix)
        if not names:
            storage_fail("rsync", f"Did not find existing container at: {source}")
        os.makedirs(dest, exist_ok=True)
        for name in names:
            rel = name[len(prefix) :].lstrip("/")
            if (not recursive and "/" in rel) or (exclude and exclude.match(rel)):
                continue
            meta = store.meta(bucket, name)
            target = os.path.join(dest, rel)
            mtime = int(meta.get("mtime") or meta.get("created") or meta.get("updated") or 0)
            if (
                os.path.isfile(target)
                and os.path.getsize(target) == int(meta["size"])
                and int(os.path.getmtime(target)) == mtime
            ):
                continue
            print(f"Copying {source.rstrip('/')}/{rel} to file://{target}", file=sys.stderr)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            data = store.get(bucket, name)
            with open(target, "wb") as handle:
                handle.write(data)
            os.utime(target, (mtime, mtime))
            copied += 1
            total += len(data)
    elif dest.startswith("gs://") and not source.startswith("gs://"):
        store.apply_fault("upload")
        if not os.path.isdir(source):
            storage_fail("rsync", f"Did not find existing container at: {source}")
        bucket, prefix = split_url(dest)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        existing = set(store.names(bucket, prefix))
        for rel, path in sorted(local_tree(source, recursive).items()):
            if exclude and exclude.match(rel):
                continue
            name = prefix + rel
            mtime = int(os.path.getmtime(path))
            if name in existing:
                meta = store.meta(bucket, name)
                # Without a stored mtime, gcloud takes the object's creation time.
                stored = int(meta.get("mtime") or meta.get("created") or meta.get("updated") or 0)
                if int(meta["size"]) == os.path.getsize(path) and stored == mtime:
                    continue
            print(f"Copying file://{path} to gs://{bucket}/{name}", file=sys.stderr)
            with open(path, "rb") as handle:
                data = handle.read()
            store.put(bucket, name, data, custom_time=flags.get("custom-time"), mtime=mtime)
            copied += 1
            total += len(data)
    else:
        storage_fail("rsync", "one of SOURCE and DESTINATION must be a gs:// URL", 2)
    print(f"  Completed files {copied} | {total}B", file=sys.stderr)


def usage_error(group: str, choice: str) -> None:
    """What calliope prints for an unknown command, then exit status 2."""
    print(f"ERROR: ({group}) Invalid choice: '{choice}'.", file=sys.stderr)
    print("Maybe you meant:\n  gcloud storage cp", file=sys.stderr)
    print("\nTo search the help text of gcloud commands, run:\n  gcloud help -- SEARCH_TERMS",
          file=sys.stderr)  # fmt: skip
    raise SystemExit(2)


def refuse_unknown(words: list[str]) -> None:
    """An older SDK (see the module docstring) lacks some `gcloud storage` commands."""
    known = os.environ.get("FAKE_GCLOUD_STORAGE_COMMANDS")
    if known is None:
        return
    if known == "none":
        usage_error("gcloud", "storage")
    have = {c.strip() for c in known.split(",") if c.strip()}
    command = words[0] if words else ""
    if command == "objects" and "objects update" not in have:
        if not any(c.startswith("objects ") for c in have):
            usage_error("gcloud.storage", "objects")
        usage_error("gcloud.storage.objects", words[1] if len(words) > 1 else "")
    if command != "objects" and command not in have:
        usage_error("gcloud.storage", command)


def storage_main(argv: list[str]) -> None:
    store = GcsStore(os.environ.get("FAKE_GCS_ROOT", "/nonexistent-fake-gcs"))
    flags: dict[str, str] = {}
    words: list[str] = []
    for arg in argv:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags[name] = value
        elif arg.startswith("-") and len(arg) == 2:
            flags[arg[1:]] = ""
        else:
            words.append(arg)
    command = words[0] if words else ""
    refuse_unknown(words)
    try:
        if command == "cat" and len(words) == 2:
            store.apply_fault("read")
            bucket, name = split_url(words[1])
            if not store.exists(bucket, name):
                storage_fail("cat", f"The following URLs matched no objects or files:\n-{words[1]}")
            sys.stdout.buffer.write(store.get(bucket, name))
        elif command == "cp" and len(words) == 3 and words[2].startswith("gs://"):
            store.apply_fault("write")
            bucket, name = split_url(words[2])
            with open(words[1], "rb") as handle:
                store.put(
                    bucket, name, handle.read(), custom_time=flags.get("custom-time"),
                    mtime=os.path.getmtime(words[1]),
                )  # fmt: skip
        elif command == "rsync" and len(words) == 3:
            storage_rsync(store, flags, words[1], words[2])
        elif command == "objects" and words[1:2] == ["update"] and len(words) == 3:
            store.apply_fault("touch")
            bucket, pattern = split_url(words[2])
            prefix = pattern[:-2] if pattern.endswith("**") else pattern
            names = store.names(bucket, prefix) if pattern.endswith("**") else [pattern]
            names = [n for n in names if store.exists(bucket, n)]
            if not names:
                storage_fail(
                    "objects.update",
                    f"The following URLs matched no objects or files:\n-{words[2]}",
                )
            for name in names:
                if "custom-time" in flags:
                    store.set_custom_time(bucket, name, flags["custom-time"])
                print(f"Updating gs://{bucket}/{name}", file=sys.stderr)
        else:
            print(f"ERROR: (gcloud.storage) Invalid choice: {' '.join(words[:2])!r}.",
                  file=sys.stderr)  # fmt: skip
            raise SystemExit(2)
    except StoreError as error:
        storage_fail(command.replace(" ", "."), f"HTTPError {error.status}: {error}")


def main(argv: list[str]) -> None:
    record(argv)
    if argv[:1] == ["storage"]:
        storage_main(argv[1:])
        return
    if argv[:3] != ["secrets", "versions", "access"] or len(argv) < 4:
        print(f"ERROR: (gcloud) Invalid choice: {' '.join(argv[:3])!r}.", file=sys.stderr)
        raise SystemExit(2)
    version = argv[3]
    flags = dict(a[2:].split("=", 1) for a in argv[4:] if a.startswith("--") and "=" in a)
    secret, project = flags.get("secret"), flags.get("project")
    if not secret or not project:
        print(
            "ERROR: (gcloud.secrets.versions.access) missing --secret or --project", file=sys.stderr
        )
        raise SystemExit(2)
    metadata = os.environ.get("GCE_METADATA_HOST")
    if not metadata:
        fail("UNAUTHENTICATED", "You do not currently have an active account selected.")
    token_url = f"http://{metadata}/computeMetadata/v1/instance/service-accounts/default/token"
    token = get_json(token_url, {"Metadata-Flavor": "Google"})["access_token"]
    api = os.environ.get("SECRET_MANAGER_API_ENDPOINT", "https://secretmanager.googleapis.com")
    resource = f"projects/{project}/secrets/{secret}/versions/{version}"
    try:
        answer = get_json(
            f"{api.rstrip('/')}/v1/{resource}:access", {"Authorization": f"Bearer {token}"}
        )
    except urllib.error.HTTPError as error:
        if error.code == 403:
            fail(
                "PERMISSION_DENIED",
                f"Permission 'secretmanager.versions.access' denied for resource '{resource}' "
                "(or it may not exist).",
            )
        fail("NOT_FOUND" if error.code == 404 else "UNKNOWN", f"HTTP {error.code} for {resource}")
    payload = answer.get("payload")
    assert isinstance(payload, dict)
    sys.stdout.buffer.write(base64.b64decode(str(payload["data"])))


if __name__ == "__main__":
    main(sys.argv[1:])
