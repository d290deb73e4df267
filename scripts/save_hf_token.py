"""Save the Hugging Face token in Secret Manager, so the TPU VM can fetch it itself.

The one place an operator handles the token, so that it never passes through Pulumi, a command
line or an environment listing. It checks first that the token can read the stack's gated
model, which turns a failure on a billing TPU (vLLM cannot download the weights) into one at
setup. Usage and what each refusal means: docs/secrets-and-access.md "One-time step: accept the
licence and store the token". To copy it from another project: `gcloud secrets versions access
latest --secret=hf-token --project=OLD | python -m scripts.save_hf_token --project NEW`.
"""

from __future__ import annotations

import argparse
import getpass
import hmac
import ipaddress
import os
import re
import sys
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import google.auth.exceptions
import google_crc32c
import httpx2  # huggingface_hub's HTTP client; its transport errors
import requests
import yaml
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.cloud.secretmanager import SecretManagerServiceClient, SecretVersion
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)

from components.messages import operator_line
from components.vm.google_credentials import ACCESS_TOKEN_ENV, google_credentials

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROG = "save_hf_token"
ENDPOINT_ENV = "SECRET_MANAGER_API_ENDPOINT"
DEFAULT_STACK = "v5e1"
DEFAULT_SECRET = "hf-token"  # noqa: S105 - a secret's name, not a secret
#: huggingface_hub's own setting, read when the library is imported.
HF_ENDPOINT_ENV = "HF_ENDPOINT"
HF_SITE = "https://huggingface.co"
NAMESPACE = "tpu-vllm"
LABELS = {"managed-by": "tpu-vllm", "purpose": "hf-token"}
ADMIN_ROLE = "roles/secretmanager.admin"
# The gcp provider falls back to these when gcp:project is unset, so `pulumi up` would too.
PROJECT_ENV_VARS = (
    "GOOGLE_PROJECT",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "CLOUDSDK_CORE_PROJECT",
)
MAX_PAYLOAD_BYTES = 64 * 1024
TIMEOUT_SECONDS = 30.0
_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_PROJECT_ID = re.compile(r"^[a-z0-9][a-z0-9:.-]{0,61}[a-z0-9]$|^\d+$")


class Failure(Exception):
    """``code`` is the exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def log(message: str) -> None:
    print(operator_line(PROG, message), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Where: project and secret name, from flags, else the stack file.


@dataclass(frozen=True)
class Target:
    project: str
    secret_id: str
    source: str
    #: "" when it is not checked (--no-check).
    model_id: str = ""
    #: Where the model id came from, for messages.
    model_source: str = ""

    @property
    def secret_name(self) -> str:
        return f"projects/{self.project}/secrets/{self.secret_id}"

    def version_name(self, number: int) -> str:
        return f"{self.secret_name}/versions/{number}"


def read_stack_config(path: Path, explicit: bool) -> Mapping[str, Any]:
    """Empty if the file is absent and was not named."""
    if not path.is_file():
        if explicit:
            raise Failure(f"stack file {path} does not exist")
        return {}
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise Failure(f"cannot read stack file {path}: {error}".replace("\n", " ")) from None
    config = (document or {}).get("config") if isinstance(document, dict) else None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise Failure(f"{path}: `config:` is not a map")
    return config


def resolve_target(args: argparse.Namespace) -> Target:
    default_file = PROJECT_ROOT / f"Pulumi.{args.stack}.yaml"
    stack_file = Path(args.stack_file) if args.stack_file else default_file
    config = read_stack_config(stack_file, explicit=bool(args.stack_file))

    project = (args.project or "").strip()
    source = "--project"
    if not project:
        value = config.get("gcp:project")
        if isinstance(value, str) and value.strip():
            project, source = value.strip(), f"gcp:project in {stack_file.name}"
    if not project:
        for name in PROJECT_ENV_VARS:
            if os.environ.get(name, "").strip():
                project, source = os.environ[name].strip(), f"${name}"
                break
    if not project:
        raise Failure(
            f"no GCP project: none given with --project and no gcp:project in {stack_file}; "
            f"run `pulumi config set gcp:project YOUR_PROJECT -s {args.stack}` "
            "or pass --project YOUR_PROJECT"
        )
    if not _PROJECT_ID.match(project):
        raise Failure(f"{project!r} ({source}) is not a GCP project id")

    secret_id = (args.secret or "").strip()
    if not secret_id:
        access = config.get(f"{NAMESPACE}:access")
        if access is not None and not isinstance(access, dict):
            raise Failure(f"{stack_file}: `{NAMESPACE}:access` must be a map")
        secret_id = str((access or {}).get("hfTokenSecret") or DEFAULT_SECRET).strip()
    if not _SECRET_ID.match(secret_id):
        raise Failure(
            f"{secret_id!r} is not a Secret Manager secret id (1-255 letters, digits, _ and -)"
        )
    if args.no_check:
        return Target(project, secret_id, source)
    model_id, model_source = (args.model or "").strip(), "--model"
    if not model_id:
        model = config.get(f"{NAMESPACE}:model")
        value = model.get("id") if isinstance(model, dict) else None
        if isinstance(value, str) and value.strip():
            model_id, model_source = value.strip(), f"{NAMESPACE}:model.id in {stack_file.name}"
    if not model_id:
        raise Failure(
            f"no model to check the token against: {stack_file} has no {NAMESPACE}:model.id; "
            "pass --model MODEL_ID, or --no-check to store the token without checking"
        )
    return Target(project, secret_id, source, model_id, model_source)


# --------------------------------------------------------------------------------------------
# What: the token, from stdin or a hidden prompt. Never from argv.


def read_token() -> bytes:
    stdin = sys.stdin
    if stdin is None:
        raise Failure(
            'no stdin: pipe the token in, e.g. printf %s "$TOKEN" | python -m scripts.save_hf_token'
        )
    if stdin.isatty():
        try:
            text = getpass.getpass("Hugging Face token (input hidden): ")
        except EOFError:
            text = ""
        token = text.encode("utf-8")
    else:
        token = stdin.buffer.read(MAX_PAYLOAD_BYTES + 3)
    if token.endswith(b"\r\n"):
        token = token[:-2]
    elif token.endswith(b"\n"):
        token = token[:-1]
    if not token:
        raise Failure(
            'empty token: pipe it in (printf %s "$TOKEN" | python -m scripts.save_hf_token) '
            "or run without a pipe to be prompted"
        )
    if len(token) > MAX_PAYLOAD_BYTES:
        raise Failure(f"token is larger than Secret Manager's {MAX_PAYLOAD_BYTES}-byte limit")
    if not token.startswith(b"hf_"):
        log(
            "warning: this does not look like a Hugging Face token (they start with hf_); "
            "saving it anyway"
        )
    if token != token.strip() or any(c in token for c in b" \t\r\n"):
        log("warning: the token contains whitespace; saving it as given")
    return token


# --------------------------------------------------------------------------------------------
# Hugging Face: can this token read the model?


def check_model_access(token: bytes, target: Target) -> None:
    """A ``Failure`` naming the fix (and the licence page) if the token cannot read the model."""
    endpoint = os.environ.get(HF_ENDPOINT_ENV, "").strip()
    if endpoint:
        _bypass_proxy_for_loopback(endpoint)
    model = target.model_id
    page = f"{HF_SITE}/{model}"
    where = f"(the model is {target.model_source})"
    try:
        text = token.decode("ascii")
    except UnicodeDecodeError:
        raise Failure("the token is not ASCII text, so it cannot be a Hugging Face token") from None
    log(f"checking that the token can read {model} on Hugging Face")
    try:
        HfApi(token=text).auth_check(model)
    except GatedRepoError:
        raise Failure(
            f"the token cannot read {model}: it is a gated model and the token's account has "
            f"not been granted access {where}. Accept its licence at {page} while logged in "
            "as the token's owner, wait until access is granted, then run this again"
        ) from None
    except RepositoryNotFoundError:
        raise Failure(
            f"{model} was not found on Hugging Face, or it is private and this token cannot "
            f"see it {where}. Check the model id (its page would be {page}) and the token at "
            f"{HF_SITE}/settings/tokens"
        ) from None
    except OfflineModeIsEnabled:
        raise Failure(
            "HF_HUB_OFFLINE is set, so the token cannot be checked: unset it, or pass "
            "--no-check to store the token without checking"
        ) from None
    except HfHubHTTPError as error:
        status = error.response.status_code
        detail = _one_line(error.server_message or "") or f"HTTP {status}"
        if status == 401:
            raise Failure(
                f"Hugging Face rejected the token (401: {detail}): it is mistyped, expired or "
                f"revoked. Create a read token at {HF_SITE}/settings/tokens"
            ) from None
        if status == 403:
            raise Failure(
                f"the token may not read {model} (403: {detail}) {where}. A fine-grained token "
                "needs read access to public gated repositories (or to this one) at "
                f"{HF_SITE}/settings/tokens; the licence is accepted at {page}"
            ) from None
        raise Failure(
            f"Hugging Face answered {status} while checking access to {model}: {detail}. "
            "Retry, or pass --no-check to store the token without checking",
            code=1,
        ) from None
    except (httpx2.HTTPError, OSError) as error:
        raise Failure(
            f"cannot reach Hugging Face to check the token: {_one_line(error)}. Retry, or pass "
            "--no-check to store the token without checking",
            code=1,
        ) from None
    log(f"the token can read {model}")


# --------------------------------------------------------------------------------------------
# Secret Manager.


def crc32c(data: bytes) -> int:
    """The checksum Secret Manager verifies on versions it stores."""
    return int(google_crc32c.value(data))


def _bypass_proxy_for_loopback(endpoint: str) -> None:
    """requests sends even 127.0.0.1 through $HTTP(S)_PROXY unless $NO_PROXY lists it."""
    host = urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}").hostname
    if not host:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        for name in ("NO_PROXY", "no_proxy"):
            current = os.environ.get(name, "")
            os.environ[name] = f"{current},{host}" if current else host


def make_client() -> SecretManagerServiceClient:
    # The REST transport keeps an explicit scheme (http://127.0.0.1:PORT reaches a loopback
    # fake) and prefixes https:// to a bare host[:port].
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip()
    options = None
    if endpoint:
        _bypass_proxy_for_loopback(endpoint)
        options = ClientOptions(api_endpoint=endpoint)
    try:
        credentials = google_credentials()
    except google.auth.exceptions.DefaultCredentialsError:
        raise Failure(
            "no Google credentials: run `gcloud auth application-default login` "
            f"or set {ACCESS_TOKEN_ENV}"
        ) from None
    return SecretManagerServiceClient(
        credentials=credentials, transport="rest", client_options=options
    )


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# The REST transport raises the HTTP classes (`Forbidden`, `Conflict`, ...: api_core
# from_http_status), never the gRPC ones, so the canonical status comes from the JSON body.


def _error_body(error: api_exceptions.GoogleAPICallError) -> Mapping[str, Any]:
    response = getattr(error, "response", None)
    try:
        payload = response.json() if response is not None else None
    except ValueError:
        payload = None
    body = payload.get("error") if isinstance(payload, dict) else None
    return body if isinstance(body, dict) else {}


def api_status(error: api_exceptions.GoogleAPICallError) -> str:
    """E.g. ``FAILED_PRECONDITION``."""
    status = _error_body(error).get("status")
    if isinstance(status, str) and status:
        return status
    grpc_code = getattr(error, "grpc_status_code", None)
    return str(getattr(grpc_code, "name", "")) if grpc_code is not None else ""


def api_message(error: api_exceptions.GoogleAPICallError) -> str:
    """The API's own message, without the "METHOD URL: " prefix api_core adds."""
    message = _error_body(error).get("message")
    return _one_line(message if isinstance(message, str) and message else error.message)


@contextmanager
def api_step(step: str, target: Target) -> Iterator[None]:
    try:
        yield
    except api_exceptions.Forbidden as error:
        if error.reason == "SERVICE_DISABLED":
            raise Failure(
                f"the Secret Manager API is not enabled in project {target.project}: run "
                f"`gcloud services enable secretmanager.googleapis.com --project "
                f"{target.project}`, wait a minute, and retry"
            ) from None
        raise Failure(
            f"permission denied {step} in project {target.project}: grant yourself "
            f"{ADMIN_ROLE} on {target.project} (or at least secretmanager.secrets.create + "
            f"secretmanager.versions.add) [{api_message(error)}]"
        ) from None
    except api_exceptions.Unauthorized as error:
        raise Failure(
            f"credentials rejected {step}: run `gcloud auth application-default login` or "
            f"renew {ACCESS_TOKEN_ENV} [{api_message(error)}]"
        ) from None
    except google.auth.exceptions.RefreshError as error:
        # On a 401 google-auth refreshes and retries; a static token or stale ADC cannot.
        raise Failure(
            f"credentials rejected or expired {step}: run `gcloud auth application-default "
            f"login` or renew {ACCESS_TOKEN_ENV} [{_one_line(error)}]"
        ) from None
    except api_exceptions.GoogleAPICallError as error:
        raise Failure(
            f"Secret Manager error {step}: {error.code} {api_status(error)}: {api_message(error)}",
            code=1,
        ) from None
    except api_exceptions.RetryError as error:
        raise Failure(f"Secret Manager did not answer {step}: {_one_line(error)}", code=1) from None
    except requests.exceptions.RequestException as error:
        raise Failure(f"cannot reach Secret Manager {step}: {_one_line(error)}", code=1) from None


def version_number(name: str) -> int:
    """N of ``projects/X/secrets/S/versions/N`` (the API may answer with project numbers)."""
    last = name.rsplit("/", 1)[-1]
    if not last.isdigit():
        raise Failure(f"unexpected version name from the API: {name}", code=1)
    return int(last)


def ensure_secret(client: SecretManagerServiceClient, target: Target) -> bool:
    """False if creating was denied (it may exist). Create first and take ALREADY_EXISTS as
    success: no need for secretmanager.secrets.get besides."""
    with api_step(f"creating secret {target.secret_id}", target):
        try:
            client.create_secret(
                request={
                    "parent": f"projects/{target.project}",
                    "secret_id": target.secret_id,
                    "secret": {"replication": {"automatic": {}}, "labels": LABELS},
                },
                timeout=TIMEOUT_SECONDS,
            )
            log(f"created secret {target.secret_name} (automatic replication)")
        except api_exceptions.Conflict as error:
            if api_status(error) != "ALREADY_EXISTS":
                raise
            log(f"secret {target.secret_name} exists")
        except api_exceptions.Forbidden as error:
            if error.reason == "SERVICE_DISABLED":
                raise
            # Someone with only secretmanager.versions.add on an existing secret can go on.
            log(
                "warning: not allowed to create secrets here (secretmanager.secrets.create); "
                "trying to add a version to an existing one"
            )
            return False
    return True


def latest_if_same(client: SecretManagerServiceClient, target: Target, token: bytes) -> int | None:
    """The latest version's number if it already holds ``token``: a rerun adds nothing."""
    with api_step(f"reading the latest version of {target.secret_id}", target):
        try:
            response = client.access_secret_version(
                name=f"{target.secret_name}/versions/latest",
                timeout=TIMEOUT_SECONDS,
            )
        except api_exceptions.NotFound:
            return None  # no versions yet
        except api_exceptions.BadRequest as error:
            if api_status(error) != "FAILED_PRECONDITION":
                raise
            return None  # the latest version is disabled or destroyed
        except api_exceptions.Forbidden as error:
            if error.reason == "SERVICE_DISABLED":
                raise
            log(
                "warning: cannot read the latest version (secretmanager.versions.access "
                "denied), so a new version is added without checking for a duplicate"
            )
            return None
    payload = response.payload
    if "data_crc32c" in payload and payload.data_crc32c != crc32c(payload.data):
        raise Failure(
            f"the latest version of {target.secret_name} failed its CRC32C check "
            "(corrupted in transit); retry",
            code=1,
        )
    if hmac.compare_digest(payload.data, token):
        return version_number(response.name)
    return None


def add_version(
    client: SecretManagerServiceClient, target: Target, token: bytes, created: bool
) -> int:
    with api_step(f"adding a version to {target.secret_id}", target):
        try:
            version = client.add_secret_version(
                request={
                    "parent": target.secret_name,
                    "payload": {"data": token, "data_crc32c": crc32c(token)},
                },
                timeout=TIMEOUT_SECONDS,
            )
        except api_exceptions.NotFound:
            if created:
                raise
            raise Failure(
                f"secret {target.secret_name} does not exist and creating it was denied: "
                f"grant yourself {ADMIN_ROLE} on {target.project} (or at least "
                "secretmanager.secrets.create + secretmanager.versions.add)"
            ) from None
    return version_number(version.name)


def disable_older(client: SecretManagerServiceClient, target: Target, keep: int) -> None:
    with api_step(f"listing versions of {target.secret_id}", target):
        versions = [
            (version_number(v.name), v.state)
            for v in client.list_secret_versions(parent=target.secret_name, timeout=TIMEOUT_SECONDS)
        ]
    older = sorted(n for n, state in versions if n < keep and state == SecretVersion.State.ENABLED)
    for number in older:
        with api_step(f"disabling version {number} of {target.secret_id}", target):
            client.disable_secret_version(name=target.version_name(number), timeout=TIMEOUT_SECONDS)
        log(f"disabled version {number}")
    if not older:
        log("no older enabled versions to disable")


def save(
    client: SecretManagerServiceClient, target: Target, token: bytes, disable_previous: bool
) -> str:
    created = ensure_secret(client, target)
    number = latest_if_same(client, target, token)
    if number is not None:
        log(f"version {number} (the latest) already holds this token; nothing added")
    else:
        number = add_version(client, target, token, created)
        log(f"added version {number}")
    if disable_previous:
        disable_older(client, target, number)
    return target.version_name(number)


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.save_hf_token",
        description=(
            "Store the Hugging Face token in Secret Manager for the TPU VM to fetch. The token "
            "is read from stdin when it is piped in, else from a hidden prompt; there is no "
            "flag for it. Prints only the version's resource name on stdout."
        ),
        epilog=(
            f"Environment: {ENDPOINT_ENV} (API endpoint with scheme, e.g. http://127.0.0.1:PORT "
            f"for a fake), {HF_ENDPOINT_ENV} (huggingface_hub's Hub endpoint, for the check), "
            f"{ACCESS_TOKEN_ENV} (else Application Default Credentials), and, when "
            f"gcp:project is unset, {', '.join(PROJECT_ENV_VARS)}. "
            "Exit status: 0 saved or already current, 2 a problem you can fix, 1 other failures."
        ),
    )
    parser.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help="Pulumi stack whose config to read (default: %(default)s)",
    )
    parser.add_argument(
        "--stack-file",
        metavar="PATH",
        help="stack config file to read instead of Pulumi.STACK.yaml in the project root",
    )
    parser.add_argument("--project", help="GCP project (default: gcp:project from the stack file)")
    parser.add_argument(
        "--secret",
        metavar="NAME",
        help="secret id (default: tpu-vllm:access.hfTokenSecret from the stack "
        f"file, else {DEFAULT_SECRET})",
    )
    parser.add_argument(
        "--model",
        metavar="MODEL_ID",
        help=f"Hugging Face model the token must be able to read (default: {NAMESPACE}:model.id "
        "from the stack file)",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="store the token without asking Hugging Face whether it can read the model "
        "(e.g. offline)",
    )
    parser.add_argument(
        "--disable-previous",
        action="store_true",
        help="afterwards, disable every older ENABLED version",
    )
    return parser.parse_args(argv)


def fail(message: str, code: int) -> NoReturn:
    log(f"error: {message}")
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = resolve_target(args)
        log(f"project {target.project} ({target.source}), secret {target.secret_id}")
        token = read_token()
        if target.model_id:
            check_model_access(token, target)
        else:
            log("not checking whether the token can read the model (--no-check)")
        client = make_client()
        name = save(client, target, token, args.disable_previous)
    except Failure as failure:
        fail(str(failure), failure.code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    print(name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
