"""Google credentials for code that runs outside the Pulumi gcp provider.

The VM's dynamic providers (tpu_api, org_policy) and scripts/save_hf_token.py talk to Google
APIs themselves. They honour the same static-token variable as the gcp provider
(``GOOGLE_OAUTH_ACCESS_TOKEN``) so that CI and short-lived tokens work the same way everywhere,
and fall back to Application Default Credentials. Tests use the token variable with loopback
fakes, so no token refresh ever tries to reach Google.
"""

from __future__ import annotations

import os

import google.auth
import google.auth.credentials
import google.oauth2.credentials

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
ACCESS_TOKEN_ENV = "GOOGLE_OAUTH_ACCESS_TOKEN"  # noqa: S105 - a variable name


def google_credentials() -> google.auth.credentials.Credentials:
    """Return credentials from ``GOOGLE_OAUTH_ACCESS_TOKEN`` if set, else ADC."""
    token = os.environ.get(ACCESS_TOKEN_ENV, "").strip()
    if token:
        return google.oauth2.credentials.Credentials(token=token)  # type: ignore[no-untyped-call]
    credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    return credentials
