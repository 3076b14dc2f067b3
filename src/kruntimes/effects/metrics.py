"""The scheduler's Prometheus metrics (SPEC §9) and the one HTTP port that serves them.

Every collector lives on a dedicated ``CollectorRegistry`` per ``SchedulerMetrics``
instance, never the process-global one, so tests and two schedulers in one
process do not clash. Label values come only from closed sets fixed in code:
the ``Literal`` types below, and for ``filter_rejections`` the (plugin, reason)
pairs the scheduler's plugin registry declares (each filter's ``name`` and
``reasons``), read once when the metrics are built. Every child is created up
front so a scrape shows all series at zero before the first event, and no
runtime, Run, pod, namespace, selector or resource name can ever become a label.

Beyond SPEC §9, the operator metrics (docs/operations.md, "Metrics and alerts"): the work
queue under client-go's ``workqueue_*`` names, parked Runs by reason, leadership, cycle
outcomes, API requests by method and status class, Event writes by result, informer relists
and watch restarts, objects a thread skipped after an unexpected exception, the process and
its GC, and the build. What other objects already count
(the recorder's Event tallies, the informers' relists, the queue's depth) is read at scrape
time rather than mirrored on every change.

``serve`` runs ``httpserving.HttpServer`` (one selector thread, bounded connections, request
deadlines) exposing exactly ``/metrics``, ``/healthz`` (also as ``/livez``) and ``/readyz``; any other path is a 404. With ``secure``
(``--metrics-secure``, ``kubeclient/secureserving.py``) it speaks TLS and every request but the
always-allowed paths must carry a bearer token the API server authenticates and authorises,
before the path is even looked at (401, 403), as kube-scheduler's secure port does.

One module at about 650 lines: every series an operator scrapes is declared, created at zero and
served from one registry here, next to the closed label sets that bound it; split, the one place
that says what the scheduler exports would be several.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from kruntimes import __version__
from kruntimes.kubeclient.httpserving import DEFAULT_LIMITS, DropReason, Handler, HttpServer, Limits, Request, Response
from kruntimes.kubeclient.kube import ErrorKind
from kruntimes.kubeclient.secureserving import SecureServing
from kruntimes.kubeclient.threads import SKIPPABLE, Stage, SupervisedThread
from kruntimes.pure.queueing import ParkReason
from kruntimes.kubeclient.kube import ServerReset as ServerReset
from kruntimes.pure.step import ConflictStage, Outcome, SyncResult
from kruntimes.pure.wakeups import WakeupSource
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY

log = logging.getLogger(__name__)

Verb: TypeAlias = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "other"]
"""The HTTP method of an API request; anything else is ``other`` (never the raw method)."""
CodeClass: TypeAlias = Literal["2xx", "3xx", "4xx", "5xx", "none", "other"]
"""An API answer's status class; ``none`` when no HTTP answer arrived."""
EventWriteResult: TypeAlias = Literal["written", "failed", "dropped", "fenced"]
InformerKind: TypeAlias = Literal["runs", "pods", "workspaces"]
WaitingReason: TypeAlias = Literal["capacity", "constraints", "unfit", "queued"]
"""How a Pending Run waits: parked for a reason (``queueing.ParkReason``), or ``queued``: ready,
being planned, or waiting out a back-off or a retry delay."""
QUEUE_NAME: Final = "runs"
"""The ``name`` label of the ``workqueue_*`` families (client-go's convention: one value per queue)."""

_VERBS: Final[Mapping[str, Verb]] = {"GET": "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE"}


def verb_of(method: str) -> Verb:
    return _VERBS.get(method.upper(), "other")


def code_class(status: int) -> CodeClass:
    if status == 0:
        return "none"
    if 200 <= status < 300:
        return "2xx"
    if 300 <= status < 400:
        return "3xx"
    if 400 <= status < 500:
        return "4xx"
    if 500 <= status < 600:
        return "5xx"
    return "other"


def package_version() -> str:
    """The project's one version (docs/release.md): what `kruntimes --version` prints and the image's tag."""
    return __version__


class EventCounts(Protocol):
    """What the Event writes metric reads of ``kubeclient.events.EventRecorder`` at scrape time."""

    @property
    def written(self) -> int: ...

    @property
    def failed(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    @property
    def fenced(self) -> int: ...


class InformerCounts(Protocol):
    """What the informer metrics read of ``informer.Informer`` at scrape time."""

    @property
    def kind(self) -> InformerKind: ...

    @property
    def relists(self) -> int: ...

    @property
    def watch_restarts(self) -> int: ...


class SkipCounts(Protocol):
    """What the skipped-objects metric reads of ``threads.Supervisor`` at scrape time."""

    def skips(self) -> Mapping[tuple[SupervisedThread, Stage], int]: ...


class QueueView(Protocol):
    """What the queue gauges read of the current term's ``SchedulingQueue`` at scrape time."""

    def depth(self) -> int: ...

    def waiting(self) -> Mapping[ParkReason, int]: ...

    def oldest_waiting(self) -> Mapping[WaitingReason, int]: ...

class ShardView(Protocol):
    """What the shard gauges read of ``sharding.ShardMember`` at scrape time."""

    @property
    def members(self) -> int: ...

    @property
    def owned(self) -> frozenset[str]: ...

    @property
    def desired(self) -> frozenset[str]: ...


ShardHandoff: TypeAlias = Literal["acquired", "released", "fenced", "lost"]
"""``acquired``: an assignment taken; ``released``: one let go; ``fenced``: an expired member's
Lease deleted by this replica; ``lost``: a namespace dropped because this replica was fenced,
its renewals failed for the renew deadline, or the assignment named another replica."""
ShardState: TypeAlias = Literal["owned", "desired"]


def filter_pairs(registry: Registry) -> tuple[tuple[str, str], ...]:
    """The ``(plugin, reason)`` label pairs of ``filter_rejections``: each filter's declared reasons.

    In registration order, reasons sorted; with the default registry these are
    the pairs SPEC §4 defines. A pair outside this set is a filter reason the
    framework refuses (the cycle fails), so it never reaches ``count_rejections``.
    """
    return tuple((entry.name, reason) for entry in registry.filters for reason in sorted(entry.plugin.reasons))


_disable_created_metrics: Final[Callable[[], None]] = disable_created_metrics
"""prometheus-client leaves this one function unannotated; this line gives it its real type."""

SYNC_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""A cycle is pure planning plus at most one status write: sub-millisecond to a few seconds."""
WORK_BUCKETS: Final = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)
"""client-go's workqueue buckets are 1e-8 … 10 s; ours start where a Python cycle can end."""
API_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""An API request: a few ms on a quiet server to the 30 s request timeout."""
QUEUE_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Creation → bind spans a free pod (tens of ms) to a Run that waited many minutes for capacity."""


class SchedulerMetrics:
    """The SPEC §9 collectors on their own registry, with one typed method per thing counted."""

    def __init__(self, registry: Registry = DEFAULT_REGISTRY, *, wall: Callable[[], float] = time.time) -> None:
        """``registry`` is the plugin set the scheduler's cycles run: its filters' declared
        reasons are the only ``filter_rejections`` series. ``wall``: seconds since the epoch, for
        the age of the oldest waiting Run."""
        # The text format would otherwise add a ``*_created`` gauge per series: names SPEC §9
        # does not list and the upstream Go scheduler never exposes. The switch is process-wide
        # in prometheus-client; this process exposes only our registries.
        _disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._sync = Counter(
            "kruntimes_scheduler_sync_total", "Scheduling cycles by result.", ["result"], registry=r
        )
        self._sync_duration = Histogram(
            "kruntimes_scheduler_sync_duration_seconds",
            "Duration of one scheduling cycle.",
            registry=r,
            buckets=SYNC_BUCKETS,
        )
        self._no_pods = Counter(
            "kruntimes_scheduler_no_pods_total", "Cycles that found no feasible runtime pod.", registry=r
        )
        self._queue_duration = Histogram(
            "kruntimes_scheduler_run_queue_duration_seconds",
            "Time from a Run's creation to its successful bind.",
            registry=r,
            buckets=QUEUE_BUCKETS,
        )
        self._rejections = Counter(
            "kruntimes_scheduler_filter_rejections_total",
            "Pods rejected by a filter plugin, by plugin and reason.",
            ["plugin", "reason"],
            registry=r,
        )
        self._conflicts = Counter(
            "kruntimes_scheduler_reservation_conflicts_total",
            "Reservations lost to a concurrent change, by stage.",
            ["stage"],
            registry=r,
        )
        self._confirm_failures = Counter(
            "kruntimes_scheduler_bind_confirm_failures_total",
            "Reads that could not settle a bind whose outcome is unknown, by error kind; the reservation is kept meanwhile.",
            ["kind"],
            registry=r,
        )
        for kind in get_args(ErrorKind):
            self._confirm_failures.labels(kind=kind)
        self._wakeups = Counter(
            "kruntimes_scheduler_pending_run_wakeups_total",
            "Pending Runs re-queued by a cluster change, by source.",
            ["source"],
            registry=r,
        )
        self._handoffs = Counter(
            "kruntimes_scheduler_shard_handoffs_total",
            "Sharded mode: namespace assignments that changed hands here, by kind.",
            ["kind"],
            registry=r,
        )
        self._handoff_series: Mapping[str, Counter] = {k: self._handoffs.labels(kind=k) for k in get_args(ShardHandoff)}
        self._resets = Counter(
            "kruntimes_scheduler_server_resets_total",
            "Times the API server showed it lost its state (every cache relisted, the ledger rebuilt), by how.",
            ["reason"],
            registry=r,
        )
        self._reset_series: Mapping[str, Counter] = {k: self._resets.labels(reason=k) for k in get_args(ServerReset)}
        for result in get_args(SyncResult):
            self._sync.labels(result=result)
        self._rejection_series: Mapping[tuple[str, str], Counter] = {
            (plugin, reason): self._rejections.labels(plugin=plugin, reason=reason)
            for plugin, reason in filter_pairs(registry)
        }
        self._undeclared = 0
        for stage in get_args(ConflictStage):
            self._conflicts.labels(stage=stage)
        for source in get_args(WakeupSource):
            self._wakeups.labels(source=source)
        self._operator_metrics(r, wall)

    def _operator_metrics(self, r: CollectorRegistry, wall: Callable[[], float]) -> None:
        """What operators alert on beyond SPEC §9: the queue, leadership, outcomes, the API,
        Events, informers, the process. Gauges and the counters other objects already keep
        are read at scrape time (``_Live``), so the hot paths pay nothing for them."""
        name = {"name": QUEUE_NAME}
        self._adds = Counter("workqueue_adds_total", "Keys added to the work queue.", ["name"], registry=r).labels(**name)
        self._retries = Counter(
            "workqueue_retries_total", "Keys re-added with back-off after a failure.", ["name"], registry=r
        ).labels(**name)
        self._waited = Histogram(
            "workqueue_queue_duration_seconds",
            "Time a key waited in the work queue before a worker took it.",
            ["name"],
            registry=r,
            buckets=QUEUE_BUCKETS,
        ).labels(**name)
        self._worked = Histogram(
            "workqueue_work_duration_seconds",
            "Time a worker spent on one key.",
            ["name"],
            registry=r,
            buckets=WORK_BUCKETS,
        ).labels(**name)
        self._outcomes = Counter(
            "kruntimes_scheduler_cycle_outcomes_total", "Scheduling cycles by what they came to.", ["outcome"], registry=r
        )
        self._outcome_series: Mapping[str, Counter] = {o: self._outcomes.labels(outcome=o) for o in get_args(Outcome)}
        self._api = Counter(
            "kruntimes_scheduler_api_requests_total",
            "API server requests by HTTP method and status class.",
            ["verb", "code"],
            registry=r,
        )
        self._api_series: Mapping[tuple[str, str], Counter] = {
            (verb, code): self._api.labels(verb=verb, code=code) for verb in get_args(Verb) for code in get_args(CodeClass)
        }
        self._api_latency = Histogram(
            "kruntimes_scheduler_api_request_duration_seconds",
            "API server request latency by HTTP method.",
            ["verb"],
            registry=r,
            buckets=API_BUCKETS,
        )
        self._api_latency_series: Mapping[str, Histogram] = {v: self._api_latency.labels(verb=v) for v in get_args(Verb)}
        dropped = Counter(
            "kruntimes_scheduler_http_dropped_connections_total",
            "Connections to the metrics and probe ports refused at the connection limit, cut at a deadline, "
            "or answered 431 for an oversized request head.",
            ["reason"],
            registry=r,
        )
        self._dropped_series: Mapping[str, Counter] = {k: dropped.labels(reason=k) for k in get_args(DropReason)}
        Gauge("kruntimes_build_info", "The scheduler's version; always 1.", ["version"], registry=r).labels(
            version=package_version()
        ).set(1)
        self._live = _Live(wall)
        r.register(self._live)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    def count_sync(self, result: SyncResult) -> None:
        self._sync.labels(result=result).inc()

    def observe_sync_duration(self, seconds: float) -> None:
        self._sync_duration.observe(seconds)

    def count_no_pods(self) -> None:
        self._no_pods.inc()

    def observe_queue_duration(self, seconds: float) -> None:
        """Seconds from the Run's ``creationTimestamp`` to the successful bind."""
        self._queue_duration.observe(max(seconds, 0.0))

    def count_rejections(self, rejections: Iterable[tuple[str, str, int]]) -> None:
        """Add a plan's ``(plugin, reason, count)`` rejections.

        Every pair is one the registry declared: the framework fails a cycle whose
        filter returns anything else, and the scheduler builds its metrics from the
        registry its cycles run. A pair outside the set therefore means the two
        were wired to different registries. It is never made a label (cardinality
        stays closed) nor folded into a declared series (that would misreport why
        pods were refused): it is logged as an error and counted in
        ``undeclared_rejections``.
        """
        for plugin, reason, count in rejections:
            if count <= 0:
                continue
            series = self._rejection_series.get((plugin, reason))
            if series is None:
                self._undeclared += count
                log.error(
                    "filter rejection outside the declared (plugin, reason) set; not counted",
                    extra={"plugin": plugin[:64], "reason": reason[:64], "count": count},
                )
                continue
            series.inc(count)

    @property
    def undeclared_rejections(self) -> int:
        """Rejections ``count_rejections`` refused to label; 0 unless metrics and cycles disagree on the registry."""
        return self._undeclared

    def count_confirm_failure(self, kind: ErrorKind) -> None:
        self._confirm_failures.labels(kind=kind).inc()

    def count_conflict(self, stage: ConflictStage) -> None:
        self._conflicts.labels(stage=stage).inc()

    def count_wakeups(self, source: WakeupSource, keys: int = 1) -> None:
        """``keys`` Pending Runs were woken by one change of ``source``."""
        if keys > 0:
            self._wakeups.labels(source=source).inc(keys)

    # --- operator metrics -----------------------------------------------------------

    def count_outcome(self, outcome: Outcome) -> None:
        series = self._outcome_series.get(outcome)
        if series is not None:
            series.inc()

    def observe_request(self, method: str, status: int, seconds: float) -> None:
        """One API request (``kube.Kube``'s observer): ``status`` 0 when no answer arrived."""
        verb = verb_of(method)
        self._api_series[(verb, code_class(status))].inc()
        self._api_latency_series[verb].observe(max(seconds, 0.0))

    def queue_added(self) -> None:
        self._adds.inc()

    def queue_retried(self) -> None:
        self._retries.inc()

    def queue_waited(self, seconds: float) -> None:
        self._waited.observe(max(seconds, 0.0))

    def queue_worked(self, seconds: float) -> None:
        self._worked.observe(max(seconds, 0.0))

    def watch_queue(self, queue: QueueView | None) -> None:
        """The term's queue the depth and waiting gauges read (``None``: no term, both 0)."""
        self._live.queue = queue

    def count_dropped_connection(self, reason: DropReason) -> None:
        """One connection to an HTTP port refused or cut (``httpserving.HttpServer``'s ``on_drop``)."""
        self._dropped_series[reason].inc()

    def count_handoff(self, kind: ShardHandoff) -> None:
        self._handoff_series[kind].inc()

    def count_server_reset(self, reason: ServerReset) -> None:
        self._reset_series[reason].inc()

    def watch_shard(self, shard: ShardView | None) -> None:
        """Sharded mode's membership the shard gauges read (``None``: not sharded, all 0)."""
        self._live.shard = shard

    def watch_leader(self, leading: Callable[[], bool]) -> None:
        self._live.leading = leading

    def watch_events(self, events: EventCounts) -> None:
        self._live.events = events

    def watch_informers(self, informers: Iterable[InformerCounts]) -> None:
        self._live.informers = tuple(informers)

    def watch_supervisor(self, supervisor: SkipCounts) -> None:
        self._live.supervisor = supervisor

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's current value (tests and debugging)."""
        return self.registry.get_sample_value(name, labels or {})


class _Live(Collector):
    """Families read at scrape time from the objects that keep them; every closed label value
    is always present (0 when nothing is watched yet)."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self.queue: QueueView | None = None
        self.leading: Callable[[], bool] = lambda: False
        self.events: EventCounts | None = None
        self.informers: tuple[InformerCounts, ...] = ()
        self.shard: ShardView | None = None
        self.supervisor: SkipCounts | None = None
        self.wall = wall

    def collect(self) -> Iterator[Metric]:
        queue = self.queue
        depth = GaugeMetricFamily("workqueue_depth", "Keys ready in the work queue.", labels=["name"])
        depth.add_metric([QUEUE_NAME], 0 if queue is None else queue.depth())
        yield depth
        parked: Mapping[ParkReason, int] = {} if queue is None else queue.waiting()
        waiting = GaugeMetricFamily(
            "kruntimes_scheduler_waiting_runs", "Pending Runs parked until a change can help them, by reason.", labels=["reason"]
        )
        for reason in get_args(ParkReason):
            waiting.add_metric([reason], parked.get(reason, 0))
        yield waiting
        created: Mapping[WaitingReason, int] = {} if queue is None else queue.oldest_waiting()
        oldest = GaugeMetricFamily(
            "kruntimes_scheduler_oldest_waiting_run_seconds",
            "Age (since creation) of the oldest Pending Run this replica schedules, by how it waits; 0 when none.",
            labels=["reason"],
        )
        now = self.wall()
        for how in get_args(WaitingReason):
            since = created.get(how)
            oldest.add_metric([how], 0.0 if since is None else max(0.0, now - since / 1e6))
        yield oldest
        leader = GaugeMetricFamily("kruntimes_scheduler_leader", "1 while this replica leads and may write, else 0.")
        leader.add_metric([], 1 if self.leading() else 0)
        yield leader
        events = self.events
        writes = CounterMetricFamily(
            "kruntimes_scheduler_event_writes", "Events by what became of them.", labels=["result"]
        )
        for result in get_args(EventWriteResult):
            writes.add_metric([result], 0 if events is None else getattr(events, result))
        yield writes
        relists = CounterMetricFamily(
            "kruntimes_scheduler_informer_relists", "Lists after an informer's first, by kind.", labels=["kind"]
        )
        restarts = CounterMetricFamily(
            "kruntimes_scheduler_informer_watch_restarts", "Watches that ended and were opened again, by kind.", labels=["kind"]
        )
        for kind in get_args(InformerKind):
            mine = [i for i in self.informers if i.kind == kind]
            relists.add_metric([kind], sum(i.relists for i in mine))
            restarts.add_metric([kind], sum(i.watch_restarts for i in mine))
        yield relists
        yield restarts
        supervisor = self.supervisor
        skips: Mapping[tuple[SupervisedThread, Stage], int] = {} if supervisor is None else supervisor.skips()
        skipped = CounterMetricFamily(
            "kruntimes_scheduler_skipped_objects",
            "Objects whose handling raised an unexpected exception and were skipped (the thread went on), by thread and stage.",
            labels=["thread", "stage"],
        )
        for thread, stage in SKIPPABLE:
            skipped.add_metric([thread, stage], skips.get((thread, stage), 0))
        yield skipped
        shard = self.shard
        members = GaugeMetricFamily("kruntimes_scheduler_shard_members", "Sharded mode: live members in this replica's view.")
        members.add_metric([], 0 if shard is None else shard.members)
        yield members
        namespaces = GaugeMetricFamily(
            "kruntimes_scheduler_shard_namespaces",
            "Sharded mode: namespaces open for writes here (owned) and those this replica should own (desired).",
            labels=["state"],
        )
        for state in get_args(ShardState):
            count = 0 if shard is None else len(shard.owned if state == "owned" else shard.desired)
            namespaces.add_metric([state], count)
        yield namespaces


# --- the HTTP port ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probes:
    """What the health endpoints ask: each is a callable so the answer is current at request time."""

    ready: Callable[[], bool]
    """``/readyz``: informers have synced (a standby that is synced is ready: it can take over)."""
    healthy: Callable[[], bool] = lambda: True
    """``/healthz``: the process is alive and its threads are running."""


Endpoint: TypeAlias = Literal["/metrics", "/healthz", "/livez", "/readyz"]
"""``/livez`` is ``/healthz`` under the name newer Kubernetes components use for liveness (and that
``--authorization-always-allow-paths`` names by default)."""
ALL_ENDPOINTS: Final[frozenset[Endpoint]] = frozenset({"/metrics", "/healthz", "/livez", "/readyz"})
METRICS_ENDPOINTS: Final[frozenset[Endpoint]] = frozenset({"/metrics"})
PROBE_ENDPOINTS: Final[frozenset[Endpoint]] = frozenset({"/healthz", "/livez", "/readyz"})


SECURE_WORKERS: Final = 2
"""Threads answering the ``--metrics-secure`` port: a request there may wait for a TokenReview
or a SubjectAccessReview, which must not hold up the other connections."""
_TEXT: Final = "text/plain; charset=utf-8"


def handler(
    registry: CollectorRegistry,
    probes: Probes,
    endpoints: frozenset[Endpoint] = ALL_ENDPOINTS,
    secure: SecureServing | None = None,
) -> Handler:
    """What the port answers: ``endpoints`` by GET or HEAD, anything else 404 (405 for another
    method); with ``secure``, authentication and authorization come before the path is looked at."""
    served: frozenset[str] = frozenset(endpoints)

    def answer(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"method not allowed\n", _TEXT, (("Allow", "GET, HEAD"),))
        path = request.path
        if secure is not None:
            verdict = secure.auth.check(path, request.method, request.header("Authorization"))
            if not verdict.allowed:
                return Response(verdict.status, f"{verdict.message}\n".encode(), _TEXT)
        if path not in served:
            return Response(404, b"not found\n", _TEXT)
        if path == "/metrics":
            encoder, content_type = choose_encoder(request.header("Accept") or "")
            return Response(200, encoder(registry), content_type)
        return _probe(probes.ready if path == "/readyz" else probes.healthy)

    return answer


def _probe(check: Callable[[], bool]) -> Response:
    try:
        ok = check()
    except Exception:  # a probe that raises is a failing probe, never a crashed server
        log.exception("health probe raised")
        ok = False
    return Response(200, b"ok\n", _TEXT) if ok else Response(503, b"not ready\n", _TEXT)


class MetricsServer:
    """A running ``/metrics`` + ``/healthz`` + ``/readyz`` server (``httpserving.HttpServer``)."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server

    @property
    def port(self) -> int:
        return self._server.address[1]

    @property
    def host(self) -> str:
        return self._server.address[0]

    @property
    def url(self) -> str:
        host = self.host
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if self._server.secure else "http"
        return f"{scheme}://{shown}:{self.port}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.close()


def serve(
    registry: CollectorRegistry,
    probes: Probes,
    host: str = "0.0.0.0",
    port: int = 8080,
    *,
    endpoints: frozenset[Endpoint] = ALL_ENDPOINTS,
    secure: SecureServing | None = None,
    limits: Limits = DEFAULT_LIMITS,
    on_drop: Callable[[DropReason], None] | None = None,
) -> MetricsServer:
    """Start serving ``endpoints`` on ``host:port`` (``port=0`` picks a free one) and return at once;
    over TLS with delegated authentication and authorization when ``secure`` is given. ``on_drop``
    hears of every connection refused or cut (``SchedulerMetrics.count_dropped_connection``).

    Raises ``OSError`` when the address cannot be bound (in use, no such interface).
    """
    server = HttpServer(
        (host, port),
        handler(registry, probes, endpoints, secure),
        tls=None if secure is None else secure.tls.current,
        limits=limits,
        workers=0 if secure is None else SECURE_WORKERS,
        on_drop=on_drop or (lambda reason: None),
    )
    return MetricsServer(server)
