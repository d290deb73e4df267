"""The `monitoring` section: metrics, logs, the dashboard, the uptime check and the alerts.

On by default: what a stack needs to be watched (metrics, logs, dashboard). Off: what bills past a
free allotment and opens the port (the uptime check), and alerts nobody receives (no channels).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.config.reader import Reader, as_bool, as_str_list, parse_duration

DEFAULT_SCRAPE_INTERVAL = "30s"  # GoogleCloudPlatform/prometheus-engine examples/vllm: 30s
DEFAULT_SCRAPE_SECONDS = 30
#: The Ops Agent raises a shorter interval to 10 s (confgenerator/prometheus.go); past 5 min a
#: series goes stale between scrapes (Prometheus' lookback).
MIN_SCRAPE_SECONDS = 10
MAX_SCRAPE_SECONDS = 300
#: `projects/P/notificationChannels/ID` (Monitoring v3 NotificationChannel.name).
_CHANNEL_RE = re.compile(
    r"^projects/[a-z0-9][a-z0-9.:-]{4,61}[a-z0-9]/notificationChannels/[0-9A-Za-z_-]+$"
)


@dataclass(frozen=True)
class MonitoringSettings:
    """What the stack declares to watch the server (components/monitoring.py)."""

    enabled: bool = True
    scrape_interval_seconds: int = DEFAULT_SCRAPE_SECONDS
    uptime_check: bool = False
    #: Where alerts go; empty: no alert policy is created.
    notification_channels: tuple[str, ...] = ()

    @property
    def alerts(self) -> bool:
        return bool(self.notification_channels)


def parse_monitoring(r: Reader) -> MonitoringSettings:
    enabled = r.get("enabled", as_bool, True, "true or false")
    uptime = r.get("uptimeCheck", as_bool, False, "true or false")
    interval = _parse_scrape_interval(r)
    none: tuple[str, ...] = ()
    channels = r.get(
        "notificationChannels",
        _as_channel_list,
        none,
        "a list of notification channels, projects/P/notificationChannels/ID",
    )
    for channel in channels:
        if not _CHANNEL_RE.match(channel):
            r.fail(
                "notificationChannels",
                list(channels),
                f"{channel!r} is not a notification channel name. Fix: give each as "
                "projects/PROJECT/notificationChannels/ID (`gcloud beta monitoring channels "
                "list --format='value(name)'`)",
            )
            channels = ()
            break
    if channels and not enabled:
        r.fail(
            "notificationChannels",
            list(channels),
            "alerts need the metrics they watch, and tpu-vllm:monitoring.enabled is false. "
            "Fix: remove the channels, or set tpu-vllm:monitoring.enabled to true",
        )
        channels = ()
    return MonitoringSettings(
        enabled=enabled,
        scrape_interval_seconds=interval,
        uptime_check=uptime,
        notification_channels=channels,
    )


def _as_channel_list(value: object) -> tuple[str, ...]:
    """A list, or one comma-separated string (as `pulumi config set` gives lists elsewhere)."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(v.strip() for v in as_str_list(value))


def _parse_scrape_interval(r: Reader) -> int:
    raw = r.values.get("scrapeInterval", DEFAULT_SCRAPE_INTERVAL)
    try:
        seconds = parse_duration(raw)
    except ValueError:
        seconds = -1
    if not MIN_SCRAPE_SECONDS <= seconds <= MAX_SCRAPE_SECONDS:
        r.fail(
            "scrapeInterval",
            raw,
            f"must be a duration from {MIN_SCRAPE_SECONDS}s to {MAX_SCRAPE_SECONDS // 60}m "
            "(the Ops Agent scrapes at least every 10 s; past 5 m every series goes stale "
            "between scrapes). Fix: e.g. 30s or 1m",
        )
        return DEFAULT_SCRAPE_SECONDS
    return seconds
