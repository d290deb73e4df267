"""Fake `gcloud secrets versions access`, behaving like gcloud on a GCE/TPU VM.

Real gcloud on the VM takes its identity from the metadata server and reads Secret Manager over
HTTPS, writing the payload to stdout. This does the same against the loopback fakes
(`GCE_METADATA_HOST`, `SECRET_MANAGER_API_ENDPOINT`), with gcloud's error wording and exit codes,
and records each call's argv and environment to `$FAKE_DOCKER_STATE/gcloud_invocations.jsonl`
so tests can prove no secret was passed in. Stdlib only: it runs under the system python3.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.request

COMMAND = "gcloud.secrets.versions.access"


def record(argv: list[str]) -> None:
    state = os.environ.get("FAKE_DOCKER_STATE")
    if state:
        with open(os.path.join(state, "gcloud_invocations.jsonl"), "a", encoding="utf-8") as log:
            log.write(json.dumps({"argv": ["gcloud", *argv], "env": dict(os.environ)}) + "\n")


def fail(status: str, message: str) -> None:
    print(f"ERROR: ({COMMAND}) {status}: {message}", file=sys.stderr)
    raise SystemExit(1)


def get_json(url: str, headers: dict[str, str]) -> dict[str, object]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - loopback fakes
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return dict(json.load(response))


def main(argv: list[str]) -> None:
    record(argv)
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
