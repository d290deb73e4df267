"""The `model` section: which model is served, and whether its weights fit the chip's HBM."""

from __future__ import annotations

from dataclasses import dataclass

from components import catalog
from components.catalog import Chip
from components.config.keys import NAMESPACE
from components.config.reader import Reader, as_float, as_str
from components.config.vllm import VllmSettings


@dataclass(frozen=True)
class ModelSettings:
    id: str
    weights_gib: float


def parse_model(r: Reader) -> ModelSettings | None:
    model_id = r.get("id", as_str, "", "a Hugging Face model id like google/gemma-4-E2B-it")
    if not model_id:
        if "id" not in r.values:
            r.fail("id", None, "required. Fix: the Hugging Face model id to serve")
        return None
    entry = catalog.MODELS.get(model_id)
    weights = r.get("weightsGiB", as_float, None, "GiB of weights in HBM, e.g. 8.97")
    if weights is not None and weights <= 0:
        r.fail("weightsGiB", weights, "must be positive. Fix: the GiB its weights take in HBM")
        return None
    if weights is None and entry is None:
        r.fail(
            "id",
            model_id,
            f"not in the catalog ({', '.join(catalog.MODELS)}), so its size "
            "is unknown. Fix: `pulumi config set --path 'tpu-vllm:model.weightsGiB' N` "
            "with the GiB its weights take in HBM",
        )
        return None
    if weights is None:
        assert entry is not None
        weights = entry.weights_gib
    return ModelSettings(id=model_id, weights_gib=weights)


def check_fit(chip: Chip, model: ModelSettings, vllm: VllmSettings, problems: list[str]) -> None:
    usable = round(chip.hbm_gib * vllm.gpu_memory_utilization, 2)
    if model.weights_gib < usable:
        return
    fits = [
        c.name
        for c in catalog.CHIPS.values()
        if model.weights_gib < c.hbm_gib * vllm.gpu_memory_utilization
    ]
    hint = f"a chip whose HBM holds it ({', '.join(fits)})" if fits else "a smaller model"
    problems.append(
        f"{NAMESPACE}:model.id = {model.id!r} does not fit {NAMESPACE}:tpu.chip = "
        f"{chip.name!r}: {model.weights_gib:.2f} GiB of weights vs {usable:.2f} GiB usable HBM "
        f"({chip.chips} chip(s) x {chip.family.hbm_gib_per_chip:.2f} GiB HBM x "
        f"gpuMemoryUtilization {vllm.gpu_memory_utilization} = {usable:.2f} GiB), with nothing "
        f"left for the KV cache. Fix: use {hint}"
    )
