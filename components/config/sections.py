"""The parts of the config a server is rendered from, so its component holds no more than that.

The VM's server and the GKE workload read most sections, but never `dns`, `gke` or the
backend. Their Args hold a `ServerSettings` / `WorkloadSettings`; the renderers they call
accept anything with those attributes (the Protocols), a whole `StackConfig` included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from components.config.access import AccessSettings
from components.config.cache import CacheSettings
from components.config.model import ModelSettings
from components.config.monitoring import MonitoringSettings
from components.config.renewal import RenewalSettings
from components.config.tpu import TpuSettings
from components.config.vllm import VllmSettings


class ServerSections(Protocol):
    """What the node's scripts and the compile cache's key read."""

    @property
    def project(self) -> str: ...
    @property
    def stack(self) -> str: ...
    @property
    def tpu(self) -> TpuSettings: ...
    @property
    def model(self) -> ModelSettings: ...
    @property
    def vllm(self) -> VllmSettings: ...
    @property
    def cache(self) -> CacheSettings: ...
    @property
    def monitoring(self) -> MonitoringSettings: ...


class WorkloadSections(ServerSections, Protocol):
    """A server's sections, and what the Kubernetes objects around it read as well."""

    @property
    def access(self) -> AccessSettings: ...
    @property
    def renewal(self) -> RenewalSettings: ...
    @property
    def replicas(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    project: str
    stack: str
    tpu: TpuSettings
    model: ModelSettings
    vllm: VllmSettings
    cache: CacheSettings
    monitoring: MonitoringSettings

    def serving(self, image: str) -> ServerSettings:
        """These settings with `vllm.image` set to the pinned `NAME@sha256:...` the nodes run."""
        return dataclasses.replace(self, vllm=dataclasses.replace(self.vllm, image=image))


@dataclass(frozen=True, kw_only=True)
class WorkloadSettings(ServerSettings):
    access: AccessSettings
    renewal: RenewalSettings
    replicas: int
