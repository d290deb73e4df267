"""Runs on the TPU VM: copy Secret Manager versions into 0600 files with the VM's own identity.

Seed 000 piped the HF token through ssh and then into an `-e HF_TOKEN` variable, where `ps`
and `docker inspect` show it. Here the VM asks the metadata server for its service account's
token and reads each secret itself: no secret passes through Pulumi, a command line, an
environment variable or a log line; files are created 0600 before any byte is written.

Usage: python3 - [--deadline SECONDS] NAME=projects/P/secrets/S/versions/V ...
writes each to ~/.tpu-vllm/secrets/NAME. `GCE_METADATA_HOST` and `SECRET_MANAGER_API_ENDPOINT`
override the endpoints (the same variables google-auth and the operator scripts honour).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

SECRETS_DIR = os.path.expanduser("~/.tpu-vllm/secrets")
METADATA_HOST = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
API = os.environ.get("SECRET_MANAGER_API_ENDPOINT", "https://secretmanager.googleapis.com")
# Answers worth waiting on: a fresh IAM grant takes a minute or more to reach Secret Manager.
RETRYABLE = {403, 404, 429, 500, 502, 503, 504}


def log(message: str) -> None:
    print(f"fetch-secrets: {message}", file=sys.stderr, flush=True)


def get_json(url: str, headers: dict[str, str]) -> dict[str, object]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - fixed schemes
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return dict(json.load(response))


def access_token() -> str:
    url = f"http://{METADATA_HOST}/computeMetadata/v1/instance/service-accounts/default/token"
    return str(get_json(url, {"Metadata-Flavor": "Google"})["access_token"])


def read_secret(resource: str) -> bytes:
    url = f"{API.rstrip('/')}/v1/{resource}:access"
    answer = get_json(url, {"Authorization": f"Bearer {access_token()}"})
    payload = answer.get("payload")
    if not isinstance(payload, dict) or "data" not in payload:
        raise ValueError(f"{resource}: the answer has no payload")
    return base64.b64decode(str(payload["data"]))


def write_private(path: str, data: bytes) -> None:
    """Create with mode 0600 (umask 077 too) and replace atomically: never a readable moment."""
    os.umask(0o077)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temporary = f"{path}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def fetch(name: str, resource: str, deadline: float) -> None:
    start = time.monotonic()
    delay = 2.0
    while True:
        try:
            data = read_secret(resource)
            break
        except urllib.error.HTTPError as error:
            waited = time.monotonic() - start
            if error.code not in RETRYABLE or waited + delay > deadline:
                raise SystemExit(
                    f"fetch-secrets: cannot read {resource}: HTTP {error.code} after "
                    f"{waited:.0f} s. The node's service account needs "
                    "roles/secretmanager.secretAccessor on it, and the secret must have an "
                    "enabled version."
                ) from None
            log(
                f"{resource}: HTTP {error.code} (access may still be propagating); "
                f"retrying in {delay:.0f} s"
            )
        except urllib.error.URLError as error:
            if time.monotonic() - start + delay > deadline:
                raise SystemExit(f"fetch-secrets: cannot reach {error.reason}") from None
            log(f"{resource}: {error.reason}; retrying in {delay:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 30.0)
    if not data:
        raise SystemExit(f"fetch-secrets: {resource} is empty")
    write_private(os.path.join(SECRETS_DIR, name), data)
    log(f"{name}: {len(data)} bytes from {resource} -> {SECRETS_DIR}/{name} (0600)")


def main(argv: list[str]) -> None:
    deadline = 600.0
    if argv[:1] == ["--deadline"]:
        deadline = float(argv[1])
        argv = argv[2:]
    for pair in argv:
        name, _, resource = pair.partition("=")
        if not name or "/" in name or not resource:
            raise SystemExit(f"fetch-secrets: bad argument {pair!r}; want NAME=RESOURCE")
        fetch(name, resource, deadline)


if __name__ == "__main__":
    main(sys.argv[1:])
