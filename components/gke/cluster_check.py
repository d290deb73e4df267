"""The shape the GKE backend's dynamic providers share: run one check against the cluster at
create, and at update when the inputs it reads change. Subclasses stay named classes: the state
pickles a provider by its module path (tests/mocked/test_provider_state.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pulumi.dynamic as dyn

from components.engine_values import without_provider


class ClusterCheckProvider(dyn.ResourceProvider):
    """Runs `run(inputs)` at create and update; `watched` names the inputs it reads."""

    watched: ClassVar[tuple[str, ...]] = ()

    def run(self, props: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def resource_id(self, props: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        outs = without_provider(props)
        return dyn.CreateResult(id_=self.resource_id(props), outs={**outs, **self.run(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return dyn.DiffResult(changes=any(olds.get(k) != news.get(k) for k in self.watched))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        outs = without_provider(news)
        return dyn.UpdateResult(outs={**outs, **self.run(news)})
