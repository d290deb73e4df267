"""A minimal consumer of a tpu-vllm stack: its endpoint, model and API key, via StackReference.

`require_output` fails the consumer's preview if the server stack does not export a name, so a
renamed output cannot break a consumer silently. Use it for the outputs that are always present.
The outputs the contract marks optional (docs/outputs.md, "The contract": `max_run_cost_usd`,
`startup_seconds`) are absent when they have no value, because the Pulumi engine drops an output
whose value is None; read those with `get_output`, which gives None instead of failing.
Everything read here is in the tpu-vllm output contract, which
`tests/mocked/test_output_contract.py` guards (it also runs this program against each stack's
outputs).
"""

import pulumi

config = pulumi.Config()
server = pulumi.StackReference(config.require("serverStack"))

base_url = server.require_output("openai_base_url")
model = server.require_output("model")
api_key = server.require_output("api_key")  # a secret: it stays one here
expires_at = server.require_output("expires_at")  # always present: "" when the run has no end
max_run_cost = server.get_output("max_run_cost_usd")  # optional: absent for spot / on-demand

# Hand them to whatever needs an OpenAI-compatible backend: an app's environment, a Kubernetes
# secret, a Cloud Run service. Here they are re-exported, the key still as a secret.
pulumi.export("llm_base_url", base_url)
pulumi.export("llm_model", model)
pulumi.export("llm_api_key", pulumi.Output.secret(api_key))
pulumi.export(
    "llm_budget",
    pulumi.Output.all(expires_at, max_run_cost).apply(
        lambda v: (
            f"ends {v[0]}, costs at most ${v[1]:.2f}"
            if v[0] and v[1] is not None
            else "no end: bills until the server stack is destroyed"
        )
    ),
)
