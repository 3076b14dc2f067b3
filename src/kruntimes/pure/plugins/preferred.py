"""``PreferredRunAffinity``: prefer pods that satisfy more preferred (anti-)affinity weight (SPEC §5).

raw(pod) = Σ weights of preferred affinity terms with a matching target on the
pod + Σ weights of preferred anti-affinity terms with *no* matching target on
it; normalized as ``raw × 100 // max(raw)`` (all 0 when the maximum is 0). This
is a purely computational module with no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import PodScorer, ScorePlugin, normalize_to_max
from kruntimes.pure.model.objects import PodSlot, RunAffinity, Run, Snapshot, selector_hosts
from kruntimes.pure.model.plan import CycleError


def _weighted_hosts(affinity: RunAffinity, snapshot: Snapshot) -> list[tuple[int, frozenset[str]]]:
    """(signed weight, hosting pods) per term: + for preferred affinity, − for
    preferred anti-affinity (whose weight the base score already holds)."""
    signed = [(w.weight, w.term) for w in affinity.preferred] + [(-w.weight, w.term) for w in affinity.anti_preferred]
    return [(weight, selector_hosts(snapshot, term.selector)) for weight, term in signed]


@final
@dataclass(frozen=True, slots=True)
class PreferredRunAffinity:
    name: ClassVar[str] = "PreferredRunAffinity"
    fast_path: ClassVar[bool] = True
    """The raw score reads only which terms' targets a pod hosts (those pods are scored alone),
    and normalizing by the maximum does not depend on how many pods share a score."""

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        affinity = run.affinity
        if not affinity.preferred and not affinity.anti_preferred:
            return Success(_all_zero)
        base = sum(w.weight for w in affinity.anti_preferred)
        terms = [(weight, pods) for weight, pods in _weighted_hosts(affinity, snapshot) if pods]

        def scorer(slots: tuple[PodSlot, ...]) -> tuple[int, ...]:
            names = [slot.pod.name for slot in slots]
            raw = [base] * len(names)
            for weight, pods in terms:  # one pass per term that any pod hosts
                raw = [score + weight if name in pods else score for score, name in zip(raw, names)]
            return tuple(raw)

        return Success(scorer)

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return normalize_to_max(raw)


def _all_zero(slots: tuple[PodSlot, ...]) -> tuple[int, ...]:
    return (0,) * len(slots)


_: ScorePlugin = PreferredRunAffinity()
