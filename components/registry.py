"""Resolve an image tag to the digest its registry serves now, over the OCI distribution API.

Run before any resource, so a reference the registry does not have, or refuses, stops `pulumi up`
before a TPU is requested rather than as a failed `docker pull` on a billing node. The exchange:
a `HEAD` of the manifest (it does not count against Docker Hub's pull limit), an anonymous bearer
token on a 401, the digest from `Docker-Content-Digest` (OCI distribution-spec v1.1 spec.md;
Docker's "Token Authentication Specification").
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from components.image_ref import SHA256, ImageRef

#: OCI image-spec media-types.md, and Docker's manifest v2 schema 2 spec (distribution/docs).
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(MANIFEST_TYPES)
CONNECT_TIMEOUT_SECONDS = 10.0
READ_TIMEOUT_SECONDS = 30.0
#: Tries for a registry that is busy (429, 5xx) or drops the connection; 1 s, then 2 s apart.
ATTEMPTS = 3
USER_AGENT = "tpu-vllm (image pin; OCI distribution API)"
_CHALLENGE_PARAM = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


class RegistryError(Exception):
    """A lookup that failed; `kind` says how (not_found, refused, unreachable, bad_answer)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Lookup:
    """Where the manifest request goes: the reference's registry, or an override (a mirror)."""

    ref: ImageRef
    endpoint: str  # scheme://host[:port], no trailing slash

    @property
    def manifest_url(self) -> str:
        return f"{self.endpoint}/v2/{self.ref.path}/manifests/{self.ref.lookup}"


Sleep = Callable[[float], None]


def resolve(
    ref: ImageRef,
    endpoint: str | None = None,
    session: requests.Session | None = None,
    sleep: Sleep = time.sleep,
) -> str:
    """The `sha256:...` digest the registry serves for `ref`'s tag now (its own if it has one)."""
    if ref.digest:
        return ref.digest
    lookup = Lookup(ref, (endpoint or ref.api_base).rstrip("/"))
    http = session or _session()
    headers = {"Accept": ACCEPT, "User-Agent": USER_AGENT}
    answer = _send(http, "HEAD", lookup.manifest_url, headers, sleep)
    if answer.status_code == 401:
        token = _anonymous_token(http, lookup, answer.headers.get("WWW-Authenticate", ""), sleep)
        if token:
            headers["Authorization"] = f"Bearer {token}"
            answer = _send(http, "HEAD", lookup.manifest_url, headers, sleep)
    if answer.status_code == 200:
        digest = answer.headers.get("Docker-Content-Digest", "").strip()
        if not digest:  # the header is a SHOULD: the manifest's own bytes say it
            body = _send(http, "GET", lookup.manifest_url, headers, sleep)
            if body.status_code == 200:
                digest = "sha256:" + hashlib.sha256(body.content).hexdigest()
        if not SHA256.fullmatch(digest):
            raise RegistryError(
                "bad_answer",
                f"{lookup.manifest_url} answered 200 without a sha256 digest "
                f"(Docker-Content-Digest: {digest!r})",
            )
        return digest
    raise _failure(http, lookup, headers, answer, sleep)


def _session() -> requests.Session:
    """No credentials from the environment: requests would send `~/.netrc`'s to the token
    service, whose host the registry chose. Proxies are still the environment's."""
    http = requests.Session()
    http.trust_env = False
    http.proxies.update(urllib.request.getproxies())
    return http


def _send(
    http: requests.Session,
    method: str,
    url: str,
    headers: Mapping[str, str],
    sleep: Sleep,
    *,
    redirects: bool = True,
) -> requests.Response:
    """One request, tried again on a dropped connection, a 429 or a 5xx."""
    problem = ""
    for attempt in range(ATTEMPTS):
        if attempt:
            sleep(float(attempt))
        try:
            answer = http.request(
                method,
                url,
                headers=dict(headers),
                timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
                allow_redirects=redirects,
            )
        except requests.RequestException as error:
            problem = _reason(error)
            continue
        busy = answer.status_code == 429 or answer.status_code >= 500
        if busy and attempt + 1 < ATTEMPTS:
            continue
        return answer
    raise RegistryError("unreachable", f"could not reach {url} ({ATTEMPTS} tries; {problem})")


def _reason(error: requests.RequestException) -> str:
    """The socket's own words (`[Errno 111] Connection refused`), not urllib3's wrapping."""
    found = re.search(r"\[Errno -?\d+\] [^'\")\]]+", str(error))
    return found.group(0).strip() if found else type(error).__name__


def challenge(header: str) -> tuple[str, dict[str, str]]:
    """(`bearer`/`basic`/..., {param: value}) of a `WWW-Authenticate` header (RFC 6750 §3)."""
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in _CHALLENGE_PARAM.findall(params)}


def realm_problem(realm: str, endpoint: str) -> str:
    """Why the client should not follow a challenge's realm ("" if it may), so a registry cannot
    steer this machine into its network (the metadata server's 169.254.169.254). As
    go-containerregistry's `validateRealmURL` (pkg/v1/remote/transport/bearer.go), but the
    registry's own host is allowed on any port: a registry already on a private address steers
    nothing."""
    realm_url, registry_url = urllib.parse.urlsplit(realm), urllib.parse.urlsplit(endpoint)
    if realm_url.scheme not in ("https", "http"):
        return f"{realm!r} that is not https"
    if realm_url.scheme == "http" and registry_url.scheme != "http":
        return f"{realm!r} over plain http for a registry served over https"
    host = realm_url.hostname or ""
    if host == registry_url.hostname:
        return ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}", host.lower()):
            return ""  # a name: DNS-based redirection is out of scope, as in crane
        try:  # `127.1`, `2130706433`, `0x7f000001`: what the resolver reads as IPv4
            address = ipaddress.ip_address(socket.inet_aton(host))
        except OSError:
            return f"{realm!r} on a host that is neither a name nor an address"
    if address.is_private or address.is_loopback or address.is_link_local:
        return f"{realm!r} on a private, loopback or link-local address"
    return ""


def _anonymous_token(http: requests.Session, lookup: Lookup, header: str, sleep: Sleep) -> str:
    scheme, params = challenge(header)
    realm = params.get("realm", "")
    if scheme != "bearer" or not realm:
        return ""
    problem = realm_problem(realm, lookup.endpoint)
    if problem:
        raise RegistryError("refused", f"{lookup.endpoint} names a token service {problem}")
    # One `scope` parameter per space-separated entry of the challenge (the token spec).
    scopes = (params.get("scope") or f"repository:{lookup.ref.path}:pull").split()
    query: dict[str, str | list[str]] = {"scope": scopes}
    if params.get("service"):
        query["service"] = params["service"]
    answer = _send_query(http, realm, query, lookup.endpoint, sleep)
    if answer.status_code != 200:
        raise RegistryError(
            "refused",
            f"the registry's token service {realm} refused an anonymous pull token for "
            f"{lookup.ref.path} (HTTP {answer.status_code}: {_message(answer)})",
        )
    try:
        body: Any = answer.json()
    except ValueError:
        body = {}
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise RegistryError("bad_answer", f"the token service {realm} answered without a token")
    return token


def _send_query(
    http: requests.Session,
    url: str,
    query: Mapping[str, str | list[str]],
    endpoint: str,
    sleep: Sleep,
) -> requests.Response:
    """The token GET, following at most 5 redirects, each checked as the realm was
    (go-containerregistry's `realmRedirectCheck`)."""
    try:
        target = str(requests.Request("GET", url, params=dict(query)).prepare().url)
    except requests.RequestException as error:
        raise RegistryError(
            "bad_answer", f"the token realm {url!r} is not a URL ({error})"
        ) from None
    for _ in range(6):
        answer = _send(http, "GET", target, {"User-Agent": USER_AGENT}, sleep, redirects=False)
        if not answer.is_redirect:
            return answer
        target = urllib.parse.urljoin(target, answer.headers.get("Location", ""))
        problem = realm_problem(target, endpoint)
        if problem:
            raise RegistryError("refused", f"the token service redirected to {problem}")
    raise RegistryError("bad_answer", f"the token service {url} redirected more than 5 times")


def _failure(
    http: requests.Session,
    lookup: Lookup,
    headers: Mapping[str, str],
    answer: requests.Response,
    sleep: Sleep,
) -> RegistryError:
    status = answer.status_code
    detail = _message(answer)
    if not detail and status in (401, 403, 404):  # a HEAD has no body: a GET says why
        detail = _message(_send(http, "GET", lookup.manifest_url, headers, sleep))
    said = f"HTTP {status}" + (f": {detail}" if detail else "")
    where = f"{lookup.endpoint} ({lookup.manifest_url})"
    if status == 404:
        return RegistryError(
            "not_found",
            f"{where} has no {lookup.ref.path}:{lookup.ref.lookup} ({said})",
        )
    if status in (401, 403):
        return RegistryError(
            "refused",
            f"{where} refused to show {lookup.ref.path}:{lookup.ref.lookup} ({said}); "
            "Docker Hub answers so for a repository that does not exist as well as for a "
            "private one",
        )
    return RegistryError("bad_answer", f"{where} answered {said}")


def _message(answer: requests.Response) -> str:
    """The registry's `errors[].code: message` list, else the start of its body."""
    try:
        body: Any = answer.json()
    except ValueError:
        return answer.text.strip()[:300]
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors:
        return "; ".join(
            f"{e.get('code', '?')}: {e.get('message', '')}".strip()
            for e in errors
            if isinstance(e, dict)
        )
    if isinstance(body, dict) and body.get("details"):  # Docker Hub's token service
        return str(body["details"])[:300]
    return answer.text.strip()[:300]
