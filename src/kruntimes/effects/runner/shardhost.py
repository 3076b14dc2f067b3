"""Sharded mode's ``NamespaceHost``: what ``effects.sharding.ShardMember`` asks of the scheduler
for one namespace.

A namespace taken gets its own three informers (their first list is the new owner's consistent
read), or, over every namespace, a place in the query of the three cluster-wide ones; an empty
ledger for it and its Pending Runs activated once the lists are applied. A namespace let go has
its keys dropped, its informers stopped and its objects forgotten.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Literal

from kruntimes.effects.informer import Informer, NamespaceScope
from kruntimes.effects.sharding import ShardConfig, ShardMember
from kruntimes.pure.ledger import EMPTY_LEDGER, without_namespace

if TYPE_CHECKING:
    from kruntimes.effects.runner.scheduler import Scheduler

log = logging.getLogger("kruntimes.effects.runner")


class ShardHost:
    """The namespaces one replica of a shard group takes and lets go, and the cycles it runs of each."""

    def __init__(self, scheduler: Scheduler, config: ShardConfig, *, every_namespace: bool) -> None:
        self._scheduler = scheduler
        self._by_namespace: dict[str, tuple[Informer, ...]] = {}
        """With ``--namespace``: the informers of each namespace this replica takes or owns."""
        self._scope: NamespaceScope | None = None
        """Over every namespace: what the three cluster-wide informers keep."""
        self._scoped: tuple[Informer, ...] = ()
        """Those informers (started by the first round that takes a namespace)."""
        self._scope_change: Literal["", "rewatch", "relist"] = ""
        """What the round's calls ask of them at ``settle`` (guarded by the scheduler's lock)."""
        self._in_flight: dict[str, int] = {}
        """Cycles running now, by namespace (a namespace is let go when it has none)."""
        if every_namespace:
            # one query for every namespace held (the API server leaves the others out): three
            # watches per replica, not three per namespace (docs/architecture.md, "Sharded mode")
            self._scope = NamespaceScope()
            self._scoped = scheduler._informers_of(None, self._scope)
        self.member = ShardMember(
            scheduler._kube,
            config,
            self,
            on_handoff=scheduler.metrics.count_handoff,
            supervisor=scheduler._supervisor,
        )
        """This replica in its group: which namespaces it owns."""

    def namespaces_known(self, namespaces: frozenset[str]) -> None:
        scope = self._scope
        if scope is not None and scope.know(namespaces):
            with self._scheduler._lock:
                self._scope_change = self._scope_change or "rewatch"

    def settle(self) -> None:
        scope = self._scope
        if scope is None:
            return
        with self._scheduler._lock:
            change, self._scope_change = self._scope_change, ""
            if self._scheduler._stopping.is_set() or not change:
                return
            start = not self._scheduler._informers
            if start:
                if change != "relist":
                    return  # nothing kept yet: nothing to watch
                self._scheduler._informers = self._scoped
        if start:
            self._scheduler._metrics.watch_informers(self._scheduler._informers)
            for informer in self._scheduler._informers:
                informer.start()
            return
        for informer in self._scheduler._informers:
            if change == "relist":
                informer.request_relist()  # the new query, and a consistent read of what it adds
            else:
                informer.rewatch()  # the new query from the version already seen: it only leaves out more

    def watch_namespace(self, namespace: str) -> None:
        scope = self._scope
        if scope is not None:
            with self._scheduler._lock:
                if self._scheduler._stopping.is_set():
                    return
                if scope.kept_at(namespace) is None:
                    scope.keep(namespace)
                    self._scope_change = "relist"
            return
        with self._scheduler._lock:
            if namespace in self._by_namespace or self._scheduler._stopping.is_set():
                return
            informers = self._scheduler._informers_of(namespace)
            self._by_namespace[namespace] = informers
            self._scheduler._informers = tuple(i for group in self._by_namespace.values() for i in group)
        self._scheduler._metrics.watch_informers(self._scheduler._informers)
        for informer in informers:
            informer.start()

    def namespace_synced(self, namespace: str) -> bool:
        scope = self._scope
        if scope is not None:
            kept = scope.kept_at(namespace)
            scoped = self._scheduler._informers
            return kept is not None and bool(scoped) and all(informer.listed(kept) for informer in scoped)
        informers = self._by_namespace.get(namespace)
        return informers is not None and all(informer.has_synced() for informer in informers)

    def open_namespace(self, namespace: str) -> None:
        self._scheduler.ledger.swap(lambda ledger: without_namespace(ledger, namespace))
        queue = self._scheduler._queue
        if queue is not None:
            pending = queue.activate_pending(namespace)
            log.info("namespace open", extra={"namespace": namespace, "pending": pending})

    def close_namespace(self, namespace: str) -> None:
        queue = self._scheduler._queue
        if queue is not None:
            queue.drop_namespace(namespace)
        self._scheduler._events.drop_namespace(namespace)

    def namespace_busy(self, namespace: str) -> bool:
        """A cycle of the namespace is running, or one of its Events is being sent."""
        with self._scheduler._lock:
            cycling = self._in_flight.get(namespace, 0) > 0
        return cycling or self._scheduler._events.writing(namespace)

    def unwatch_namespace(self, namespace: str) -> None:
        scope = self._scope
        if scope is not None:
            narrower = scope.drop(namespace)
            for informer in self._scheduler._informers:
                informer.drop_namespace(namespace)
            if narrower:
                with self._scheduler._lock:
                    self._scope_change = self._scope_change or "rewatch"
            self._scheduler.ledger.swap(lambda ledger: without_namespace(ledger, namespace))
            return
        with self._scheduler._lock:
            informers = self._by_namespace.pop(namespace, ())
            self._scheduler._informers = tuple(i for group in self._by_namespace.values() for i in group)
        self._scheduler._metrics.watch_informers(self._scheduler._informers)
        for informer in informers:
            informer.stop()
        for informer in informers:
            if not informer.join(5.0):
                log.warning("an informer did not stop in time", extra={"namespace": namespace, "kind": informer.kind})
            informer.drop_all()
        self._scheduler.ledger.swap(lambda ledger: without_namespace(ledger, namespace))

    def begin(self, namespace: str) -> bool:
        """Count a cycle of ``namespace`` in flight if the namespace is open here."""
        with self._scheduler._lock:
            if not self.member.accepts(namespace):
                return False
            self._in_flight[namespace] = self._in_flight.get(namespace, 0) + 1
            return True

    def end(self, namespace: str) -> None:
        with self._scheduler._lock:
            left = self._in_flight.get(namespace, 0) - 1
            if left > 0:
                self._in_flight[namespace] = left
            else:
                self._in_flight.pop(namespace, None)

    def reset(self) -> None:
        """Sharded (writes are closed): let the cycles in flight finish, relist, empty the ledger,
        activate every Pending Run again."""
        deadline = time.monotonic() + 10.0
        while self._in_flight and time.monotonic() < deadline and not self._scheduler._stopping.wait(0.05):
            pass
        for informer, ticket in self._scheduler._fresh_relists():
            while not informer.wait_relisted(ticket, 0.2):
                if self._scheduler._stopping.is_set():
                    return
                if informer.join(0):
                    break  # its namespace was let go meanwhile: nothing of it to wait for
        self._scheduler.ledger.reset(EMPTY_LEDGER)
        queue = self._scheduler._queue
        if queue is not None:
            pending = queue.activate_pending()
            log.info("caches refreshed after the server lost its state", extra={"pending": pending})
