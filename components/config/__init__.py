"""The stack's configuration: the first step of the flow, and the one place that knows the keys.

`__main__.py` calls `load_stack_config()` before anything else; it reads `tpu-vllm:*` (and
`gcp:project`), rejects every mistake it can see in one `ConfigError` before a single resource
is registered, and hands back an immutable `StackConfig`. Every component, of either backend,
receives that object and never reads Pulumi config itself.

Layout: `keys.py` is the one table of every section's keys (`KEYS`); `reader.py` reads one
section's raw values and records each problem; one module per section parses it (`tpu`,
`model`, `vllm`, `access`, `cost`, `dns`, `gke`, `cache`, `renewal`, `monitoring`, and `backend` for
`tpu-vllm:backend`); `loader.py` puts them together. Everything anyone imports is re-exported
here, so `from components.config import X` is the only import the rest of the program needs.

May import: the standard library, `pulumi`, and from `components` only what describes the world
rather than builds it: `catalog` (chips, models, prices), `messages` (how errors read),
`renewal` (the renewal window's constants) and `ssh_dial` (the SSH dial budget).
Must not import: `components.vm` or `components.gke` (config is shared by both backends), nor
any module that registers resources or imports this package (that would be an import cycle).
tests/mocked/test_layout.py enforces both lists.
"""

from components.config.access import DEFAULT_HF_TOKEN_SECRET, DEFAULT_NETWORK, AccessSettings
from components.config.backend import BACKEND_ALIASES, BACKENDS, DEFAULT_BACKEND, Backend
from components.config.cache import DEFAULT_CACHE_RESTORE_TIMEOUT, CacheSettings
from components.config.dns import DnsSettings
from components.config.gke import DEFAULT_GKE_REPLICAS, GkeSettings, region_of
from components.config.keys import KEYS, NAMESPACE
from components.config.loader import StackConfig, load_stack_config, parse_stack_config
from components.config.model import ModelSettings
from components.config.monitoring import (
    DEFAULT_SCRAPE_INTERVAL,
    DEFAULT_SCRAPE_SECONDS,
    MAX_SCRAPE_SECONDS,
    MIN_SCRAPE_SECONDS,
    MonitoringSettings,
)
from components.config.reader import ConfigError, parse_duration
from components.config.renewal import (
    DEFAULT_GKE_RENEWAL_LEAD,
    RENEWAL_PROVISIONING_SECONDS,
    RENEWAL_ROUND_SECONDS,
    RenewalSettings,
)
from components.config.sections import (
    ServerSections,
    ServerSettings,
    WorkloadSections,
    WorkloadSettings,
)
from components.config.tpu import (
    DEFAULT_CAPACITY_WAIT,
    PROVISIONING_MODELS,
    TpuSettings,
    normalize_chip,
)
from components.config.vllm import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_IMAGE,
    DEFAULT_READINESS_TIMEOUT,
    FLAG_KEYS,
    FORBIDDEN_FLAGS,
    MM_MODALITY_ORDER,
    POSITIVE_INT_FLAGS,
    VLLM_DEFAULT_PORT,
    VllmSettings,
)

__all__ = [
    "BACKENDS",
    "BACKEND_ALIASES",
    "DEFAULT_BACKEND",
    "DEFAULT_CACHE_RESTORE_TIMEOUT",
    "DEFAULT_CAPACITY_WAIT",
    "DEFAULT_GKE_RENEWAL_LEAD",
    "DEFAULT_GKE_REPLICAS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_HF_TOKEN_SECRET",
    "DEFAULT_IMAGE",
    "DEFAULT_NETWORK",
    "DEFAULT_READINESS_TIMEOUT",
    "DEFAULT_SCRAPE_INTERVAL",
    "DEFAULT_SCRAPE_SECONDS",
    "FLAG_KEYS",
    "FORBIDDEN_FLAGS",
    "KEYS",
    "MAX_SCRAPE_SECONDS",
    "MIN_SCRAPE_SECONDS",
    "MM_MODALITY_ORDER",
    "NAMESPACE",
    "POSITIVE_INT_FLAGS",
    "PROVISIONING_MODELS",
    "RENEWAL_PROVISIONING_SECONDS",
    "RENEWAL_ROUND_SECONDS",
    "VLLM_DEFAULT_PORT",
    "AccessSettings",
    "Backend",
    "CacheSettings",
    "ConfigError",
    "DnsSettings",
    "GkeSettings",
    "ModelSettings",
    "MonitoringSettings",
    "RenewalSettings",
    "ServerSections",
    "ServerSettings",
    "StackConfig",
    "TpuSettings",
    "VllmSettings",
    "WorkloadSections",
    "WorkloadSettings",
    "load_stack_config",
    "normalize_chip",
    "parse_duration",
    "parse_stack_config",
    "region_of",
]
