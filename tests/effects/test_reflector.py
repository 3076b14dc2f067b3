"""The reflector against a store of raw objects: what it hands a store, and when (the informer,
the scheduler's store, is tested with it in test_informer.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from returns.result import Result, Success

from kruntimes.kubeclient.kube import ApiError, JSONObject, KubeError, ServerReset, WatchEvent
from kruntimes.kubeclient.reflector import Reflector
from tests.effects.fakes import FakeClock, FakeSleeper


def obj(name: str, rv: str) -> JSONObject:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def name(raw: object) -> str:
    assert isinstance(raw, dict)
    return str(raw["metadata"]["name"])


@dataclass
class RawListing:
    store: RawStore
    fresh: bool
    added: list[str] = field(default_factory=list)

    def add(self, raw: object) -> None:
        self.added.append(name(raw))

    def apply(self) -> None:
        self.store.calls.append(("list", tuple(self.added), self.fresh))


@dataclass
class RawStore:
    calls: list[tuple[str, tuple[str, ...], bool]] = field(default_factory=list)
    listings: list[RawListing] = field(default_factory=list)

    def listing(self, fresh: bool) -> RawListing:
        listing = RawListing(self, fresh)
        self.listings.append(listing)
        return listing

    def handle(self, event: WatchEvent) -> None:
        self.calls.append((event.type, (name(event.object),), False))


@dataclass
class ScriptedKube:
    lists: list[tuple[tuple[JSONObject, ...], str]]
    watches: list[list[WatchEvent | KubeError]]
    reflector: Reflector | None = None
    queries: list[Mapping[str, str] | None] = field(default_factory=list)

    def list(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]:
        self.queries.append(params)
        return Success(self.lists.pop(0))

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> Iterator[WatchEvent]:
        self.queries.append(params)
        if not self.watches:
            assert self.reflector is not None
            self.reflector.stop()
            return iter(())
        return self._stream(self.watches.pop(0))

    def _stream(self, script: Sequence[WatchEvent | KubeError]) -> Iterator[WatchEvent]:
        for item in script:
            if isinstance(item, KubeError):
                raise item
            yield item


def reflector(kube: ScriptedKube, store: RawStore, lost: list[ServerReset] | None = None) -> Reflector:
    clock = FakeClock()
    made = Reflector(
        kube, store, "/things", lambda: {"labelSelector": "x"}, resource="things",
        clock=clock, sleep=FakeSleeper(clock), on_lost=None if lost is None else lost.append,
    )
    kube.reflector = made
    return made


def test_a_store_gets_each_list_whole_then_each_event_and_never_a_bookmark() -> None:
    kube = ScriptedKube(
        [((obj("a", "1"), obj("b", "2")), "5"), ((obj("a", "1"),), "9")],
        [[WatchEvent("ADDED", obj("c", "6")), WatchEvent("BOOKMARK", obj("", "8")),
          KubeError(ApiError("gone", 410, "", "gone"))]],
    )
    store = RawStore()
    r = reflector(kube, store)
    r.run()
    assert store.calls == [("list", ("a", "b"), False), ("ADDED", ("c",), False), ("list", ("a",), False)]
    assert r.has_synced() and r.relists == 1 and r.resource_version == "9"
    assert kube.queries == [{"labelSelector": "x"}] * len(kube.queries), "the query is read at every request"


def test_a_list_older_than_what_was_seen_is_never_applied_and_the_next_trusts_nothing() -> None:
    kube = ScriptedKube(
        [((obj("a", "1"),), "5"), ((obj("a", "1"),), "3"), ((obj("b", "2"),), "4")],
        [[WatchEvent("ADDED", obj("c", "6")), KubeError(ApiError("gone", 410, "", "gone"))]],
    )
    store = RawStore()
    lost: list[ServerReset] = []
    r = reflector(kube, store, lost)
    r.run()
    assert [listing.added for listing in store.listings] == [["a"], ["a"], ["b"]], "every list was taken"
    assert store.calls == [("list", ("a",), False), ("ADDED", ("c",), False), ("list", ("b",), True)]
    assert lost == ["resource_version_went_back"] and r.losses == 1
