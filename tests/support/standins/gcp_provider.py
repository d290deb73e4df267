"""Stand-in for pulumi-gcp 10.2.0: every resource type and invoke the program uses.

pulumi-gcp's provider is built from a patched Terraform upstream that no module proxy serves,
so the end-to-end tests run this instead (tests/support/standins/bin/pulumi-resource-gcp). What each
type imitates, and from which source, is in its module: gcp_secrets, gcp_iam, gcp_compute,
gcp_storage, gcp_dns, gcp_container, gcp_monitoring. Inputs are checked against pulumi-gcp
10.2.0's schema (made from the pinned SDK: tests/support/standins/schema.py).
"""

from __future__ import annotations

from tests.support.standins import (
    gcp_compute,
    gcp_container,
    gcp_dns,
    gcp_iam,
    gcp_monitoring,
    gcp_secrets,
    gcp_storage,
)
from tests.support.standins.provider import StandinProvider, run

VERSION = "10.2.0"


def provider() -> StandinProvider:
    return StandinProvider(
        "gcp",
        [
            gcp_secrets.Secret(),
            gcp_secrets.SecretVersion(),
            gcp_secrets.SecretIamMember(),
            gcp_iam.Account(),
            gcp_iam.ServiceAccountIamMember(),
            gcp_iam.ProjectIamMember(),
            gcp_compute.Firewall(),
            gcp_compute.Address(),
            gcp_storage.Bucket(),
            gcp_storage.BucketIamMember(),
            gcp_dns.RecordSet(),
            gcp_container.Cluster(),
            gcp_container.NodePool(),
            gcp_monitoring.Dashboard(),
            gcp_monitoring.UptimeCheckConfig(),
            gcp_monitoring.AlertPolicy(),
        ],
        [
            gcp_secrets.GetSecret(),
            gcp_dns.GetManagedZone(),
            gcp_dns.GetRecordSet(),
            gcp_container.GetCluster(),
            gcp_container.GetEngineVersions(),
            gcp_monitoring.GetUptimeCheckIps(),
        ],
    )


def main() -> None:
    run(provider(), VERSION)


if __name__ == "__main__":
    main()
