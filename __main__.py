"""tpu-vllm: config -> TPU -> secrets -> server -> readiness -> exports. Nothing else lives here."""

import pulumi

from components.compile_cache import CompileCache, CompileCacheArgs, compile_cache_output
from components.config import load_stack_config
from components.dns import EndpointName, require_managed_zone
from components.host_key import NodeHostKey
from components.outputs import object_or_empty, text_or_empty
from components.renewal import expiry_notice, renew_command
from components.secrets import NodeSecrets, NodeSecretsArgs, require_hf_token_secret
from components.ssh import SshIdentity, ssh_command
from components.tpu import FlexStartTpu, FlexStartTpuArgs
from components.vllm import VllmServer, VllmServerArgs

config = load_stack_config()
for warning in config.warnings:
    pulumi.log.warn(warning)
require_hf_token_secret(config)
managed_zone = require_managed_zone(config)

ssh = SshIdentity("ssh")
tpu = FlexStartTpu("tpu", FlexStartTpuArgs(config=config, metadata=ssh.metadata))
host_key = NodeHostKey(
    "node-host-key",
    node_name=tpu.node,
    node_create_time=tpu.created_at,
    allow_unverified=config.access.allow_unverified_host_key,
    opts=pulumi.ResourceOptions(parent=tpu),
)
connection = ssh.connection(tpu.external_ip, host_key.host_key)
name = (
    EndpointName("endpoint-name", config, managed_zone, tpu.external_ip)
    if managed_zone is not None
    else None
)
secrets = NodeSecrets(
    "secrets",
    NodeSecretsArgs(
        config=config,
        service_account_email=tpu.service_account_email,
        connection=connection,
    ),
)
cache = (
    CompileCache(
        "compile-cache",
        CompileCacheArgs(config=config, service_account_email=tpu.service_account_email),
    )
    if config.cache.enabled
    else None
)
server = VllmServer(
    "vllm",
    VllmServerArgs(
        config=config,
        connection=connection,
        host=tpu.external_ip,
        hostname=name.hostname if name is not None else None,
        after=[secrets.fetch],
        cache=cache,
    ),
)

# The output contract other stacks read (README "Outputs"): never rename silently. No value is
# ever None, which the engine would drop: "" / {} mean "not applicable", and the two optional
# outputs are exported only when they have a value.
pulumi.export("endpoint", server.endpoint)
pulumi.export("endpoint_ip", server.endpoint_ip)
pulumi.export("openai_base_url", server.openai_base_url)
pulumi.export("model", config.model.id)
pulumi.export("api_key", secrets.api_key)
pulumi.export("api_key_secret", secrets.api_key_secret)
pulumi.export("zone", tpu.zone)
pulumi.export("chip", config.tpu.chip.accelerator_type)
pulumi.export("queued_resource", tpu.queued_resource)
pulumi.export("node", tpu.node)
pulumi.export("external_ip", text_or_empty(tpu.external_ip))
pulumi.export("internal_ip", text_or_empty(tpu.internal_ip))
pulumi.export("expires_at", text_or_empty(tpu.expires_at))
pulumi.export("renew_command", renew_command(config.stack))
pulumi.export("ssh_command", ssh_command(config.stack, tpu.external_ip))
pulumi.export("ssh_private_key", ssh.private_key_openssh)
pulumi.export("ssh_host_key", text_or_empty(host_key.host_key))
pulumi.export("hourly_cost_usd", config.hourly_cost_usd)
if config.max_run_cost_usd is not None:  # optional: spot and on-demand have no maximum
    pulumi.export("max_run_cost_usd", config.max_run_cost_usd)
pulumi.export("hbm", object_or_empty(server.hbm))
pulumi.export("startup_seconds", server.startup_seconds)  # optional: None (absent) if unrecorded
pulumi.export("zones", list(config.tpu.zones))
pulumi.export("vllm_args", config.vllm.serve_args())
pulumi.export("compile_cache", compile_cache_output(config))
pulumi.export("cache_restored", server.cache_restored)

tpu.expires_at.apply(
    lambda at: pulumi.log.info(expiry_notice(config.stack, config.tpu.max_run_seconds, at))
)
