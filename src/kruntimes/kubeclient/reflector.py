"""The reflector: keep a store in step with the API server by list + watch (client-go's Reflector).

One reflector per collection (a resource's path and query), its loop on its owner's thread:

1. list, hand every object to the store, which applies the list; mark synced;
2. watch from the list's resourceVersion with bookmarks, handing each event to the store;
3. when the watch ends (server timeout) watch again from the last version seen;
4. on ``410 Gone`` relist; the store diffs the relist against the objects it
   knows into ADDED / MODIFIED / DELETED events;
5. when the server shows it is not the one we listed from (below), relist
   trusting nothing the store knew, and tell ``on_lost``;
6. on any other failure back off (exponential, reset after progress; at least
   the server's ``Retry-After``) and try again.

What the objects become is the store's (:class:`Store`): it decodes each listed object
as its page arrives, applies a list only once the whole list is in and not older than
what was seen, and applies one watch event at a time (bookmarks only move the version).
The scheduler's store is ``kruntimes.effects.informer.Informer``.

A server that lost its state (an etcd restored from a snapshot, a dev cluster
restarted on the same address) issues resourceVersions we have already seen,
for other writes. resourceVersions are opaque strings in the API, but
kube-apiserver's are etcd revisions: decimal and increasing with every write
of any object (``kube.version_number``; other strings are never compared).
The reflector keeps the newest one it has seen and takes these as *lost*:

- a watch answered "too large resource version" (a 504 ``Timeout`` with the
  cause ``ResourceVersionTooLarge``, as the response or as an ``ERROR`` event):
  the server has not reached a version it once gave us;
- an event, a bookmark or a list older than the newest version seen: a watch
  only delivers what follows its version, and a list is a consistent read.

Lost, the reflector lists again and has the store apply that list without trusting any
object it knew (``request_relist(fresh=True)`` does the same on request): a
known object at the same resourceVersion may be another write now, so every
listed object is decoded and emitted.

kube-apiserver answers a plain watch from a version it has not reached by
holding it open and sending nothing, which is also what a watch of a resource
nobody writes gets: a watch that ends with no event and no bookmark is
followed by a one-item list (``Kube.current_version``, a consistent read),
whose version shows whether the server went back. A watch that found the
server unreachable (down, or restarting) is followed by a full list: a server
back from a restart may not hold what the store knows. Any other failed
watch (a broken stream, a 403 or 429 from a server still starting) is followed
by the same one-item read before the next watch.

Fresh reads: ``request_relist()`` asks for a new list now (the open watch is
interrupted, a back-off sleep ends) and returns a ticket; ``wait_relisted(ticket)``
returns once a list *started after the request* has been applied. A list is a
consistent read, so after it the store holds every write the server committed
before the request — what a new leader needs before it plans.
The watch ends mid-read when interrupted (an ``IncompleteRead``): that one was
asked for, so it is logged once at debug level, not as a failed watch; any other
failure of a watch stays a warning. ``rewatch()`` opens the watch again with the
query as it is now, listing nothing.

Stopping: ``stop()`` ends the loop at once: it interrupts the open watch (a
stream that can be interrupted, ``kube.WatchStream``, shuts its socket down so a
thread blocked on a quiet watch wakes), and a back-off sleep ends with it.

Its lines are logged to the logger its owner gives it (the informer's own), so an
operator reads one logger per informer whatever part of it spoke.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final, Literal, Protocol, TypeAlias, cast, runtime_checkable

from returns.result import Result

from kruntimes.kubeclient.kube import ApiError, JSONObject, KubeError, ServerReset, WatchEvent, version_number
from kruntimes.kubeclient.workqueue import Clock, ExponentialDelay

_log = logging.getLogger(__name__)

OnLost: TypeAlias = Callable[[ServerReset], None]
"""Told, on the reflector's thread, that the server is not the one this reflector listed from."""
Sleeper: TypeAlias = Callable[[float], bool]
"""Sleep ``seconds``; return ``True`` when the reflector should stop (``threading.Event.wait``)."""

RECONNECT_BACKOFF: Final = ExponentialDelay(base=0.8, cap=30.0)
"""client-go's reflector back-off: 800 ms doubling to 30 s."""
MIN_WATCH_SECONDS: Final = 1.0
"""A watch that ends with no event sooner than this counts as a failure, so a server that
closes watches at once is retried with back-off rather than in a hot loop."""


@runtime_checkable
class Interruptible(Protocol):
    """A watch stream another thread can end at once (``kube.WatchStream``)."""

    def interrupt(self) -> None: ...


class KubeReader(Protocol):
    """What a reflector needs from ``kube.Kube`` (tests pass a scripted fake)."""

    def list(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]: ...

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> Iterator[WatchEvent]: ...


class Listing(Protocol):
    """One list on its way into a store: its objects, taken as their pages arrive, are applied
    only if the whole list is in and the server did not go back (else the listing is dropped)."""

    def add(self, raw: object) -> None:
        """Take one listed object as the server sent it (the store decodes it now, or reuses
        the one it holds at the same resourceVersion)."""
        ...

    def apply(self) -> None:
        """Apply the list: the difference against what the store held, as events."""
        ...


class Store(Protocol):
    """What a reflector feeds: called on the reflector's thread only."""

    def listing(self, fresh: bool) -> Listing:
        """A list begins (before its query is read). ``fresh``: trust nothing the store knew
        (the server lost its state): every listed object is decoded and emitted again."""
        ...

    def handle(self, event: WatchEvent) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``; a ``BOOKMARK`` only
        moves the reflector's version and never reaches the store)."""
        ...


class Reflector:
    """List + watch one collection (``path`` with the query ``query()`` reads at every list,
    watch and probe) into ``store``."""

    def __init__(
        self,
        kube: KubeReader,
        store: Store,
        path: str,
        query: Callable[[], Mapping[str, str]],
        *,
        resource: str,
        log: logging.Logger = _log,
        clock: Clock = time.monotonic,
        sleep: Sleeper | None = None,
        backoff: ExponentialDelay = RECONNECT_BACKOFF,
        watch_timeout: int = 300,
        on_synced: Callable[[], None] | None = None,
        on_listed: Callable[[], None] | None = None,
        on_lost: OnLost | None = None,
    ) -> None:
        self._kube = kube
        self._store = store
        self._path = path
        self._query = query
        self._resource = resource
        """Named in every log line (``extra={"resource": ...}``)."""
        self._log = log
        self._on_lost = on_lost
        """Called on the reflector's thread when the server shows it lost its state (must be quick)."""
        self._on_synced = on_synced
        """Called once, on the reflector's thread, right after the first list is applied."""
        self._on_listed = on_listed
        """Called on the reflector's thread after every list is applied (the first one too)."""
        self._clock = clock
        self._stop = threading.Event()
        self._sleep: Sleeper = sleep if sleep is not None else self._wakeable_sleep
        self._backoff = backoff
        self._watch_timeout = watch_timeout
        self._version = ""
        self._synced = threading.Event()
        self._failures = 0
        self._stream_lock = threading.Lock()
        self._stream: object = None
        self._relisted = threading.Condition(self._stream_lock)
        self._relist_asked = 0
        """Tickets handed out by ``request_relist`` (guarded by ``_stream_lock``)."""
        self._relist_served = 0
        """The newest ticket a completed list has served."""
        self._wake = threading.Event()
        self._rewatch_asked = False
        """``rewatch`` interrupted the open watch (guarded by ``_stream_lock``)."""
        self._fresh_asked = False
        """The next list trusts nothing the store knew (guarded by ``_stream_lock``)."""
        self._newest: int | None = None
        """The newest numeric resourceVersion seen (list, event or bookmark)."""
        self.relists = 0
        """Lists after the first (each one follows a ``410 Gone`` or a failed watch)."""
        self.watch_restarts = 0
        """Watches that ended (server timeout, error, ``410 Gone``, a requested relist) and were opened again."""
        self.losses = 0
        """Times the server showed it was not the one this reflector listed from."""

    # --- public ---

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._version

    def has_synced(self) -> bool:
        """The first list has been applied to the store."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def stop(self) -> None:
        """End the loop now: interrupt the open watch, end any back-off sleep."""
        with self._stream_lock:
            self._stop.set()
            self._wake.set()
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()

    def request_relist(self, *, fresh: bool = False) -> int:
        """Ask for a fresh list now; the ticket is for :meth:`wait_relisted`.

        The open watch is interrupted and a back-off sleep ends, so the loop
        lists at once (a list that fails is retried with the usual back-off).
        ``fresh``: the list trusts nothing the store knew (the server lost its
        state): every listed object is decoded and emitted, whatever its version.
        """
        with self._stream_lock:
            self._fresh_asked = self._fresh_asked or fresh
            self._relist_asked += 1
            ticket = self._relist_asked
            self._wake.set()
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()
        return ticket

    def wait_relisted(self, ticket: int, timeout: float | None = None) -> bool:
        """``True`` once a list started after ``ticket`` was requested has been applied."""
        with self._relisted:
            return self._relisted.wait_for(lambda: self._relist_served >= ticket, timeout)

    def rewatch(self) -> None:
        """Open the watch again from the last version seen, with the query as it is now (one
        that leaves out more); unlike ``request_relist``, nothing is listed."""
        with self._stream_lock:
            self._rewatch_asked = True
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()

    def _take_rewatch(self) -> bool:
        with self._stream_lock:
            asked, self._rewatch_asked = self._rewatch_asked, False
            return asked

    def _relist_wanted(self) -> bool:
        with self._stream_lock:
            return self._relist_served < self._relist_asked

    def run(self) -> None:
        """The list/watch loop; returns when stopped."""
        need_list = True
        probe_first = False
        while not self._stop.is_set():
            if probe_first and not need_list and not self._relist_wanted():  # a list asked for shows it too
                probed = self._probe()
                if isinstance(probed, ApiError):
                    if self._pause(probed):
                        return
                    continue
                need_list = probed == "lost"
            probe_first = False
            if need_list:
                listed = self._list()
                if listed == "lost":
                    continue  # lists again at once, trusting nothing
                if listed is not None:
                    if self._pause(listed):
                        return
                    continue
                need_list = False
            outcome = self._watch()
            if outcome == "stopped":
                return
            self.watch_restarts += 1
            if outcome == "quiet" and not self._relist_wanted():
                outcome = self._probe()
            if outcome in ("gone", "lost") or self._relist_wanted():
                need_list = True
                continue
            if isinstance(outcome, ApiError):
                if outcome.kind == "unreachable":
                    need_list = True  # the server was down: back, it may not hold what we know
                else:
                    # a broken stream, a 403 or a 429 is also how a restarting server answers; a
                    # watch resumed on one that came back with less would hear nothing, so read its
                    # version before watching again
                    probe_first = True
                if self._pause(outcome):
                    return

    # --- the steps ---

    def _list(self) -> ApiError | Literal["lost"] | None:
        """Relist and have the store apply it; ``None`` on success, ``"lost"`` when the list is
        older than what this reflector has seen (nothing applied: the next list trusts nothing)."""
        with self._stream_lock:
            serving = self._relist_asked
            fresh, self._fresh_asked = self._fresh_asked, False
            if not self._stop.is_set():  # the requests this list serves must not cut a later back-off short
                self._wake.clear()
        listing = self._store.listing(fresh)  # before the query is read
        params = self._query()
        version = ""
        pages = getattr(self._kube, "list_pages", None)  # kube.Kube has it; a scripted fake may not
        if callable(pages):
            for page in pages(self._path, params):
                body = page.value_or(None)
                if body is None:
                    error = page.failure()
                    self._log.warning("list failed", extra={"resource": self._resource, "error": str(error), "kind": error.kind})
                    return cast(ApiError, error)
                for raw in body[0]:
                    listing.add(raw)
                version = body[1] or version
        else:
            result = self._kube.list(self._path, params)
            listed = result.value_or(None)
            if listed is None:
                error = result.failure()
                self._log.warning("list failed", extra={"resource": self._resource, "error": str(error), "kind": error.kind})
                return error
            for raw in listed[0]:
                listing.add(raw)
            version = listed[1]
        if self._synced.is_set():
            self.relists += 1
        number = version_number(version)
        if not fresh and self._went_back(number):
            with self._stream_lock:
                self._fresh_asked = True
            self._lose("resource_version_went_back", f"a list at resourceVersion {version}")
            return "lost"
        listing.apply()
        self._version = version
        self._newest = number
        self._failures = 0
        first = not self._synced.is_set()
        self._synced.set()
        if first and self._on_synced is not None:
            self._on_synced()
        if self._on_listed is not None:
            self._on_listed()
        with self._relisted:
            self._relist_served = max(self._relist_served, serving)
            self._relisted.notify_all()
        return None

    def _watch(self) -> Literal["stopped", "gone", "lost", "quiet", "ended"] | ApiError:
        started = self._clock()
        events = 0
        try:
            stream = self._kube.watch(
                self._path,
                self._version,
                timeout_seconds=self._watch_timeout,
                bookmarks=True,
                params=self._query(),
            )
            with self._stream_lock:
                if self._stop.is_set():
                    return "stopped"
                if self._relist_served < self._relist_asked:
                    return "ended"  # a relist was asked for before this stream could be interrupted
                if self._rewatch_asked:
                    self._rewatch_asked = False
                    return "ended"  # asked to watch with a newer query before this one opened
                self._stream = stream
            for event in stream:
                events += 1
                self._failures = 0
                if self._went_back(version_number(event.resource_version)):
                    self._lose("resource_version_went_back", f"a {event.type} at resourceVersion {event.resource_version}")
                    return "lost"
                self._handle(event)
                if self._stop.is_set():
                    return "stopped"
        except KubeError as problem:
            if self._stop.is_set():
                return "stopped"
            if self._relist_wanted():
                # request_relist interrupted this stream; the loop lists next, as asked
                self._log.debug("watch interrupted for a requested relist", extra={"resource": self._resource})
                return "ended"
            if self._take_rewatch():
                self._log.debug("watch interrupted to watch with a new query", extra={"resource": self._resource})
                return "ended"
            if problem.error.kind == "gone":
                self._log.info("resourceVersion expired; relisting", extra={"resource": self._resource, "resource_version": self._version})
                return "gone"
            if problem.error.too_large_resource_version:
                self._lose("too_large_resource_version", problem.error.message)
                return "lost"
            self._log.warning("watch failed", extra={"resource": self._resource, "error": str(problem.error), "kind": problem.error.kind})
            return problem.error
        finally:
            with self._stream_lock:
                self._stream = None
        if self._take_rewatch():
            return "ended"  # interrupted on purpose, however soon
        if events == 0 and self._clock() - started < MIN_WATCH_SECONDS:
            return ApiError("bad_response", 200, "", "watch ended at once without events")
        if events == 0:
            return "quiet"
        return "ended"

    def _handle(self, event: WatchEvent) -> None:
        """A bookmark moves the version; any other event moves it too and goes to the store."""
        version = event.resource_version
        if version:
            self._version = version
        if event.type != "BOOKMARK":
            self._store.handle(event)

    def _probe(self) -> Literal["lost", "ended"] | ApiError:
        """After a watch that got nothing: is the server's version now older than the newest seen?"""
        params = self._query()
        current = getattr(self._kube, "current_version", None)  # kube.Kube has it; a scripted fake lists
        if callable(current):
            result: Result[str, ApiError] = current(self._path, params)
            version = result.value_or(None)
            error = None if version is not None else result.failure()
        else:
            listed = self._kube.list(self._path, params)
            version = None if (body := listed.value_or(None)) is None else body[1]
            error = None if version is not None else listed.failure()
        if version is None:
            assert error is not None
            self._log.warning(
                "reading the current resourceVersion failed",
                extra={"resource": self._resource, "error": str(error), "kind": error.kind},
            )
            return error
        number, newest = version_number(version), self._newest
        if number is not None and newest is not None and number < newest:
            self._lose("resource_version_went_back", f"the collection at resourceVersion {version}")
            return "lost"
        return "ended"

    def _went_back(self, number: int | None) -> bool:
        """``number`` is older than the newest version seen; otherwise it is now the newest."""
        if number is None:
            return False
        newest = self._newest
        if newest is not None and number < newest:
            return True
        self._newest = number
        return False

    def _lose(self, reason: ServerReset, what: str) -> None:
        """The server is not the one this reflector listed from: the next list trusts nothing."""
        self.losses += 1
        with self._stream_lock:
            self._fresh_asked = True
        self._log.warning(
            "the API server lost its state; relisting from scratch",
            extra={"resource": self._resource, "what": what, "newest_seen": self._newest, "reason": reason},
        )
        if self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:  # the callback's bug must not stop this reflector's recovery
                self._log.exception("on_lost callback failed", extra={"resource": self._resource})

    def _wakeable_sleep(self, seconds: float) -> bool:
        """The default sleeper: ends early on ``stop()`` or ``request_relist()``."""
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop.is_set()

    def _pause(self, error: ApiError) -> bool:
        """Back off after a failure; ``True`` when asked to stop meanwhile."""
        delay = self._backoff.delay(self._failures)
        self._failures += 1
        if error.retry_after is not None:
            delay = max(delay, error.retry_after)
        return self._sleep(delay)
