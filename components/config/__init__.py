"""The stack's configuration: every `tpu-vllm:*` key read, checked and frozen into `StackConfig`.

`from components.config import X` is the only import the rest of the program needs. Its part of
the flow and its imports: docs/architecture.md, "components/config/".
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
