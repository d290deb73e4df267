"""tpu-vllm: load config -> build the backend's components -> export. Nothing else lives here.

`tpu-vllm:backend` picks the builder; both hand back the same outputs (docs/architecture.md).
"""

import pulumi

from components.compile_cache import compile_cache_output
from components.config import load_stack_config
from components.dns import require_managed_zone
from components.gke.backend import build_gke
from components.gke.preflight import preflight
from components.image_pin import ImagePin, ImagePinArgs, hold_everything_for
from components.monitoring import uptime_source_ranges
from components.outputs import object_or_empty, text_or_empty
from components.secrets import require_hf_token_secret
from components.vm.backend import build_vm

config = load_stack_config()
for warning in config.warnings:
    pulumi.log.warn(warning)
# Lookups that stop the run before any resource (at preview too).
require_hf_token_secret(config)
managed_zone = require_managed_zone(config)
checked = preflight(config) if config.backend == "gke" else None
uptime_ranges = uptime_source_ranges() if config.monitoring.uptime_check else []
# Registered first, and everything waits for it: a failed image lookup creates nothing.
pin = ImagePin(
    "vllm-image",
    ImagePinArgs(
        reference=config.vllm.image,
        upgrade=config.vllm.image_upgrade,
        endpoint=config.vllm.registry_endpoint,
    ),
)
hold_everything_for(pin)

backend = (
    build_gke(config, managed_zone, pin.image, checked, uptime_ranges)
    if checked is not None
    else build_vm(config, managed_zone, pin.image, uptime_ranges)
)

# The output contract other stacks read (docs/outputs.md): never rename silently, never None.
pulumi.export("endpoint", backend.endpoint)
pulumi.export("endpoint_ip", backend.endpoint_ip)
pulumi.export("openai_base_url", backend.openai_base_url)
pulumi.export("model", config.model.id)
pulumi.export("api_key", backend.api_key)
pulumi.export("api_key_secret", backend.api_key_secret)
pulumi.export("zone", backend.zone)
pulumi.export("chip", config.tpu.chip.accelerator_type)
pulumi.export("queued_resource", backend.queued_resource)
pulumi.export("node", backend.node)
pulumi.export("external_ip", text_or_empty(backend.external_ip))
pulumi.export("internal_ip", text_or_empty(backend.internal_ip))
pulumi.export("expires_at", text_or_empty(backend.expires_at))
pulumi.export("renew_command", backend.renew_command)
if config.backend == "vm" and config.renewal.lead_seconds is not None:
    # optional: absent when nothing ends (spot, on-demand) and on GKE.
    pulumi.export("renewal_lead_seconds", config.renewal.lead_seconds)
pulumi.export("ssh_command", backend.ssh_command)
pulumi.export("ssh_private_key", backend.ssh_private_key)
pulumi.export("ssh_host_key", text_or_empty(backend.ssh_host_key))
pulumi.export("hourly_cost_usd", config.hourly_cost_usd)
if config.max_run_cost_usd is not None:  # optional: spot and on-demand have no maximum
    pulumi.export("max_run_cost_usd", config.max_run_cost_usd)
pulumi.export("hbm", object_or_empty(backend.hbm))
pulumi.export("startup_seconds", backend.startup_seconds)  # optional: None (absent) if unrecorded
pulumi.export("first_answer_seconds", backend.first_answer_seconds)  # optional, as startup_seconds
pulumi.export("zones", list(config.tpu.zones))
pulumi.export("image", pin.image)  # NAME@sha256:..., what every node and replica runs
pulumi.export("vllm_args", config.vllm.serve_args())
pulumi.export("compile_cache", compile_cache_output(config))
pulumi.export("cache_restored", backend.cache_restored)
pulumi.export("replicas", backend.replicas)
pulumi.export("cluster", backend.cluster)
pulumi.export("dashboard_url", backend.dashboard_url)
pulumi.export("logs_command", backend.logs_command)
pulumi.export("logs_url", backend.logs_url)
pulumi.export("uptime_check", backend.uptime_check)
