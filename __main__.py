"""tpu-vllm: config -> TPU -> secrets -> server -> readiness -> exports. Nothing else lives here."""

import pulumi

from components.config import load_stack_config

config = load_stack_config()
for warning in config.warnings:
    pulumi.log.warn(warning)

pulumi.export("chip", config.tpu.chip.accelerator_type)
pulumi.export("zones", list(config.tpu.zones))
pulumi.export("model", config.model.id)
pulumi.export("vllm_args", config.vllm.serve_args())
pulumi.export("hourly_cost_usd", config.hourly_cost_usd)
pulumi.export("max_run_cost_usd", config.max_run_cost_usd)
