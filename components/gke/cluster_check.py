"""The shape the GKE backend's dynamic providers share: run one check against the cluster at
create, and at update when the inputs it reads change. Subclasses stay named classes: the state
pickles a provider by its module path (tests/mocked/test_provider_state.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pulumi.dynamic as dyn


class ClusterCheckProvider(dyn.ResourceProvider):
    """Runs `run(inputs)` at create and update; `watched` names the inputs it reads."""

    watched: ClassVar[tuple[str, ...]] = ()

    def run(self, props: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def resource_id(self, props: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        outs = {k: v for k, v in props.items() if k != "__provider"}
        return dyn.CreateResult(id_=self.resource_id(props), outs={**outs, **self.run(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return dyn.DiffResult(changes=any(olds.get(k) != news.get(k) for k in self.watched))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        outs = {k: v for k, v in news.items() if k != "__provider"}
        return dyn.UpdateResult(outs={**outs, **self.run(news)})
