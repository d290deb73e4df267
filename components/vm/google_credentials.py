"""Credentials for code that calls Google APIs itself: the gcp provider's static token variable
if set (CI; tests with loopback fakes never refresh), else Application Default Credentials."""

from __future__ import annotations

import os

import google.auth
import google.auth.credentials
import google.oauth2.credentials

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
ACCESS_TOKEN_ENV = "GOOGLE_OAUTH_ACCESS_TOKEN"  # noqa: S105 - a variable name


def google_credentials() -> google.auth.credentials.Credentials:
    token = os.environ.get(ACCESS_TOKEN_ENV, "").strip()
    if token:
        return google.oauth2.credentials.Credentials(token=token)  # type: ignore[no-untyped-call]
    credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    return credentials
