"""The stack's configuration: every `tpu-vllm:*` key read, checked and frozen into `StackConfig`.

`from components.config import X` is the only import the rest of the program needs. Its part of
the flow and its imports: docs/architecture.md, "components/config/".
"""

from components.config.access import AccessSettings
from components.config.backend import Backend
from components.config.dns import DnsSettings
from components.config.gke import GkeSettings
from components.config.keys import KEYS, NAMESPACE
from components.config.loader import StackConfig, load_stack_config, parse_stack_config
from components.config.model import ModelSettings
from components.config.monitoring import (
    DEFAULT_SCRAPE_SECONDS,
    MAX_SCRAPE_SECONDS,
    MIN_SCRAPE_SECONDS,
    MonitoringSettings,
)
from components.config.reader import ConfigError, parse_duration
from components.config.renewal import RENEWAL_PROVISIONING_SECONDS, RenewalSettings
from components.config.sections import (
    ServerSections,
    ServerSettings,
    WorkloadSections,
    WorkloadSettings,
)
from components.config.tpu import TpuSettings
from components.config.vllm import DEFAULT_IMAGE, VLLM_DEFAULT_PORT

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_SCRAPE_SECONDS",
    "KEYS",
    "MAX_SCRAPE_SECONDS",
    "MIN_SCRAPE_SECONDS",
    "NAMESPACE",
    "RENEWAL_PROVISIONING_SECONDS",
    "VLLM_DEFAULT_PORT",
    "AccessSettings",
    "Backend",
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
    "WorkloadSections",
    "WorkloadSettings",
    "load_stack_config",
    "parse_duration",
    "parse_stack_config",
]
