"""A Cloud DNS record set and a resolver that caches its answers, for clients on loopback.

What it imitates:

* the record: Cloud DNS API v1 `ResourceRecordSet` (`name`, `type`, `ttl`: "Number of seconds
  that this `ResourceRecordSet` can be cached by resolvers", `rrdatas`), as described in the
  discovery document bundled with google-api-python-client
  (`googleapiclient/discovery_cache/documents/dns.v1.json`, revision 20261009). An update
  replaces the data atomically ("Atomically updates the ResourceRecordSet collection",
  `changes.create`; the Terraform provider under `gcp.dns.RecordSet` patches it in place);
* the resolver: RFC 1035 §3.2.1 / RFC 2181 §8: an answer may be cached for its TTL "before the
  source of the information should again be consulted". This one keeps it exactly that long
  and never longer, which is the best case for a client; a client library that caches longer
  is what `renewal.drain`'s margin beyond the TTL is for.

The addresses are the fake TPU API's node IPs (203.0.113.N); tests/support/renewal_harness.py maps
each to the loopback port of the fake VM that plays that node, so a client "connects to the name" on
127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class RecordSet:
    """`ResourceRecordSet` as the Cloud DNS v1 API shapes it."""

    name: str
    type: str
    ttl: float
    rrdatas: tuple[str, ...]


@dataclass
class FakeManagedZone:
    """One managed zone's A records, with the time of every change."""

    records: dict[str, RecordSet] = field(default_factory=dict)
    #: (monotonic time, name, rrdatas) of each change, in order.
    changes: list[tuple[float, str, tuple[str, ...]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def upsert(self, name: str, rrdatas: list[str], ttl: float) -> None:
        """Create the A record or replace its data in place (one atomic change)."""
        with self._lock:
            self.records[name] = RecordSet(name, "A", ttl, tuple(rrdatas))
            self.changes.append((time.monotonic(), name, tuple(rrdatas)))

    def lookup(self, name: str) -> RecordSet | None:
        with self._lock:
            return self.records.get(name)


class Zone(Protocol):
    """Anything that answers a name's record set: this fake zone, or the stand-in gcp
    provider's Cloud DNS (tests/engine/test_engine_renewal.py)."""

    def lookup(self, name: str) -> RecordSet | None: ...


class CachingResolver:
    """A stub resolver: the zone's answer, kept for its TTL, then asked again."""

    def __init__(self, zone: Zone) -> None:
        self.zone = zone
        self._cache: dict[str, tuple[float, tuple[str, ...]]] = {}

    def resolve(self, name: str) -> tuple[str, ...]:
        now = time.monotonic()
        cached = self._cache.get(name)
        if cached is not None and now < cached[0]:
            return cached[1]
        record = self.zone.lookup(name)
        if record is None:
            return ()  # NXDOMAIN: nothing to cache here
        self._cache[name] = (now + record.ttl, record.rrdatas)
        return record.rrdatas
