"""Use a tpu-vllm endpoint from plain Python with the openai client.

    export OPENAI_BASE_URL=$(pulumi stack output openai_base_url -s v5e1)
    export OPENAI_API_KEY=$(pulumi stack output api_key --show-secrets -s v5e1)
    export TPU_VLLM_MODEL=$(pulumi stack output model -s v5e1)
    python openai_client.py

Use chat completions: raw `/v1/completions` returns an empty string on `-it` models (seed 000).
"""

import os

from openai import OpenAI


def main() -> None:
    client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    reply = client.chat.completions.create(
        model=os.environ["TPU_VLLM_MODEL"],
        messages=[{"role": "user", "content": "Say hi in five words."}],
        max_tokens=64,
    )
    print(reply.choices[0].message.content)


if __name__ == "__main__":
    main()
