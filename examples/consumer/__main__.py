"""A minimal consumer of a tpu-vllm stack: its endpoint, model and API key, via StackReference.

`require_output` fails the consumer's preview if the server stack does not export a name, so a
renamed output cannot break a consumer silently. Everything read here is in the tpu-vllm output
contract (README "Outputs"), which `tests/test_output_contract.py` guards.
"""

import pulumi

config = pulumi.Config()
server = pulumi.StackReference(config.require("serverStack"))

base_url = server.require_output("openai_base_url")
model = server.require_output("model")
api_key = server.require_output("api_key")  # a secret: it stays one here

# Hand them to whatever needs an OpenAI-compatible backend: an app's environment, a Kubernetes
# secret, a Cloud Run service. Here they are re-exported, the key still as a secret.
pulumi.export("llm_base_url", base_url)
pulumi.export("llm_model", model)
pulumi.export("llm_api_key", pulumi.Output.secret(api_key))
