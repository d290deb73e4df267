"""tpu-vllm: config -> TPU -> secrets -> server -> readiness -> exports. Nothing else lives here."""

import pulumi

from components.config import load_stack_config
from components.tpu import FlexStartTpu, FlexStartTpuArgs

config = load_stack_config()
for warning in config.warnings:
    pulumi.log.warn(warning)

tpu = FlexStartTpu("tpu", FlexStartTpuArgs(config=config))

pulumi.export("chip", config.tpu.chip.accelerator_type)
pulumi.export("zones", list(config.tpu.zones))
pulumi.export("model", config.model.id)
pulumi.export("vllm_args", config.vllm.serve_args())
pulumi.export("hourly_cost_usd", config.hourly_cost_usd)
pulumi.export("max_run_cost_usd", config.max_run_cost_usd)
pulumi.export("zone", tpu.zone)
pulumi.export("queued_resource", tpu.queued_resource)
pulumi.export("node", tpu.node)
pulumi.export("external_ip", tpu.external_ip)
pulumi.export("internal_ip", tpu.internal_ip)
pulumi.export("expires_at", tpu.expires_at)
