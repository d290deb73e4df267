"""The VM's node scripts: the files in scripts/remote, filled in for one node.

Values go in through `shlex.quote`, one argument per line, so a `pulumi preview` diff shows the
one flag that changed. None is a secret: the node fetches its secrets itself (secrets_fetch).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from components import compile_cache, jax_cache_env, log_links
from components.config import ServerSections
from components.remote_scripts import (
    API_KEY_FILE,
    HEADER,
    HF_TOKEN_FILE,
    READINESS_ANSWER_SECONDS,
    REMOTE,
    XLA_CACHE_MODULES,
)

CONTAINER_SECRETS = "/run/secrets"
TOOL_HEREDOC = "TPU_VLLM_XLA_CACHE"
#: pulumi-command sends no SSH keepalives, so a session silent for minutes of XLA compilation
#: could be dropped by a NAT or proxy. At most 30 s.
READINESS_HEARTBEAT_SECONDS = 20.0
#: The gcplogs driver fails a start it cannot log for (moby gcplogging.go `New`), as while a fresh
#: logWriter grant propagates; after this the server starts with Docker's default driver.
LOG_DRIVER_WAIT_SECONDS = 300
LOG_DRIVER_RETRY_SECONDS = 10.0


def template(name: str) -> str:
    return (REMOTE / name).read_text()


def continued(words: Sequence[str], indent: str = "  ") -> str:
    return " \\\n".join(f"{indent}{w}" for w in words)


def fill(text: str, values: Mapping[str, str]) -> str:
    for key, value in values.items():
        marker = f"@{key}@"
        if marker not in text:
            raise KeyError(f"{marker} is not in the template")
        text = text.replace(marker, value)
    return text


def docker_run_words(config: ServerSections, container: str) -> list[str]:
    """`docker run` as quoted words: seed 000 §1.3's command, but the secrets are read-only
    file mounts, not `-e HF_TOKEN` (which `ps` and `docker inspect` show)."""
    q = shlex.quote
    secret = f"~/.tpu-vllm/secrets/{{0}}:{CONTAINER_SECRETS}/{{0}}:ro"
    words = [
        "sudo docker run",
        "--detach",
        f"--name {q(container)}",
        "--privileged",
        "--net=host",
        # Empty if Cloud Logging refuses the driver past its wait (start_server_logged.sh).
        *(['"${LOG_FLAGS[@]}"'] if config.monitoring.enabled else []),
        "-v /dev/shm:/dev/shm",
        "--shm-size 10gb",
        # `~` is left unquoted on purpose: the user's shell expands it to the home directory.
        "-v ~/.cache/vllm:/root/.cache/vllm",
        "-e HF_HOME=/dev/shm",
        f"-e HF_TOKEN_PATH={CONTAINER_SECRETS}/{HF_TOKEN_FILE}",
        *(
            f"-e {q(f'{name}={value}')}"
            for name, value in jax_cache_env.container_env(config).items()
        ),
        f"-v {secret.format(HF_TOKEN_FILE)}",
        f"-v {secret.format(API_KEY_FILE)}",
        "-v ~/.tpu-vllm/entrypoint.sh:/tpu-vllm/entrypoint.sh:ro",
        "--entrypoint /tpu-vllm/entrypoint.sh",
        q(config.vllm.image),
        f"vllm serve {q(config.model.id)}",
    ]
    args = config.vllm.serve_args()
    index = 0
    while index < len(args):
        flag = args[index]
        has_value = index + 1 < len(args) and not args[index + 1].startswith("--")
        if has_value:
            words.append(f"{q(flag)} {q(args[index + 1])}")
            index += 2
        else:
            words.append(q(flag))
            index += 1
    return words


def tool_files_script() -> str:
    folder = compile_cache.NODE_TOOL.rsplit("/", 1)[0]
    blocks = []
    for name in XLA_CACHE_MODULES:
        text = template(name).rstrip("\n")
        if TOOL_HEREDOC in text:
            raise ValueError(f"scripts/remote/{name} contains the heredoc delimiter {TOOL_HEREDOC}")
        blocks.append(f"cat > {folder}/{name} <<'{TOOL_HEREDOC}'\n{text}\n{TOOL_HEREDOC}")
    return "\n".join(blocks)


def _cache_paths() -> dict[str, str]:
    # Unquoted, so the VM's shell expands `~`.
    return {
        "TOOL": compile_cache.NODE_TOOL,
        "WORK": compile_cache.NODE_WORK_DIR,
        "TOOL_FILES": tool_files_script(),
    }


def cache_restore_script(config: ServerSections) -> str:
    if not config.cache.enabled:
        return fill(template("cache_off.sh"), _cache_paths()).rstrip("\n")
    return fill(
        template("cache_restore.sh"),
        {
            **_cache_paths(),
            "PREFIX": shlex.quote(compile_cache.cache_prefix(config)),
            "TIMEOUT": str(config.cache.restore_timeout_seconds),
            "DIR": compile_cache.LOCAL_CACHE_DIR,
            "IMAGE": shlex.quote(config.vllm.image),
        },
    ).rstrip("\n")


def cache_save_script(config: ServerSections, container: str) -> str:
    paths = _cache_paths()
    del paths["TOOL_FILES"]
    return fill(
        template("cache_save.sh"),
        {
            **paths,
            "CONTAINER": shlex.quote(container),
            "EVERY": str(config.cache.save_interval_seconds),
        },
    )


def log_flags(config: ServerSections) -> list[str]:
    """The container's stdout/stderr to Cloud Logging (Docker docs "Google Cloud Logging
    driver"); `docker logs` still works through dual logging (Docker docs "Dual logging")."""
    label = f"{log_links.STACK_LABEL}={config.stack}"
    return [
        "--log-driver",
        "gcplogs",
        "--log-opt",
        f"labels={log_links.STACK_LABEL}",
        "--label",
        label,
    ]


def start_server_script(
    config: ServerSections,
    container: str,
    log_driver_wait: int = LOG_DRIVER_WAIT_SECONDS,
    log_driver_retry: float = LOG_DRIVER_RETRY_SECONDS,
) -> str:
    values = {
        # First, so that the prelude's own markers are filled next.
        "SERVER_PRELUDE": template("server_prelude.sh").rstrip("\n"),
        "ENTRYPOINT_SH": template("vllm_entrypoint.sh").rstrip("\n"),
        "CACHE_RESTORE": cache_restore_script(config),
        "CONTAINER": shlex.quote(container),
        "DOCKER_RUN": continued(docker_run_words(config, container), indent="").replace(
            " \\\n", " \\\n  "
        ),
    }
    if not config.monitoring.enabled:
        return HEADER + fill(template("start_server.sh"), values)
    flags = " ".join(shlex.quote(f) for f in log_flags(config))
    return HEADER + fill(
        template("start_server_logged.sh"),
        {
            **values,
            "LOG_FLAGS": flags,
            "LOG_DRIVER_WAIT": str(log_driver_wait),
            "LOG_DRIVER_RETRY": f"{log_driver_retry:g}",
        },
    )


def container_ref(start_stdout: str | None, name: str) -> str:
    lines = [line.strip() for line in (start_stdout or "").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if re.fullmatch(r"[0-9a-f]{12,64}", last) else name


def readiness_script(
    config: ServerSections,
    start_stdout: str | None,
    container: str,
    poll_seconds: float = 1.0,
    heartbeat_seconds: float = READINESS_HEARTBEAT_SECONDS,
) -> str:
    ref = container_ref(start_stdout, container)
    args = [
        "--container",
        ref,
        "--model",
        config.model.id,
        "--port",
        str(config.vllm.port),
        "--timeout",
        str(config.vllm.readiness_timeout_seconds),
        "--poll",
        str(poll_seconds),
        "--heartbeat",
        str(heartbeat_seconds),
        "--cache-result",
        f"{compile_cache.NODE_WORK_DIR}/result.json",
        "--answer-timeout",
        str(READINESS_ANSWER_SECONDS),
    ]
    pairs = [f"{shlex.quote(args[i])} {shlex.quote(args[i + 1])}" for i in range(0, len(args), 2)]
    if config.vllm.tool_call_parser:  # the server has --enable-auto-tool-choice
        pairs.append("--tool-call")
    return (
        HEADER
        + "python3 - \\\n"
        + continued(pairs)
        + " <<'TPU_VLLM_WAIT_READY'\n"
        + template("wait_ready.py").rstrip("\n")
        + "\nTPU_VLLM_WAIT_READY\n"
        + cache_save_script(config, ref)
    )
