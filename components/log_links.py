"""Where the server's log is read after the node is gone: a `gcloud logging read`, a console link.
VM: Docker's `gcplogs` driver (moby daemon/logger/gcplogs) labels each entry with the stack.
GKE: GKE's agent writes `k8s_container` entries ("About GKE logs").
"""

from __future__ import annotations

import shlex
import urllib.parse

#: The docker label (and gcplogs `labels` option) that names the stack in every log entry.
STACK_LABEL = "tpu_vllm_stack"
GCPLOGS_LOG_NAME = "gcplogs-docker-driver"
FRESHNESS = "1d"
#: gcloud applies `--freshness` only newest-first (`gcloud logging read` reference), so the
#: command reads newest first, bounded.
LIMIT = 1000


def vm_filter(project: str, stack: str) -> str:
    return (
        f'logName="projects/{project}/logs/{GCPLOGS_LOG_NAME}" AND '
        f'jsonPayload.container.metadata.{STACK_LABEL}="{stack}"'
    )


def gke_filter(namespace: str, container: str) -> str:
    return (
        f'resource.type="k8s_container" AND resource.labels.namespace_name="{namespace}" '
        f'AND resource.labels.container_name="{container}"'
    )


def logs_command(project: str, log_filter: str, message_field: str) -> str:
    """A ready-to-run command: the last day's entries, newest first, at most `LIMIT`."""
    return " ".join(
        [
            "gcloud logging read",
            shlex.quote(log_filter),
            f"--project={shlex.quote(project)}",
            f"--freshness={FRESHNESS}",
            f"--limit={LIMIT}",
            shlex.quote(f"--format=value(timestamp,{message_field})"),
        ]
    )


def logs_url(project: str, log_filter: str) -> str:
    """The Logs Explorer with the filter filled in."""
    query = urllib.parse.quote(log_filter, safe="")
    return (
        f"https://console.cloud.google.com/logs/query;query={query};duration=P1D"
        f"?project={urllib.parse.quote(project, safe='')}"
    )
