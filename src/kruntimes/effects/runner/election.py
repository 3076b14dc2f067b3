"""The elected mode (``leader_election`` without ``shard_group``): campaign for the Lease, open a
term on winning it (``Scheduler._start_leading``), end it on losing it and campaign again; while
standing by, say for whom.

Only one replica's workers run: standbys keep their caches warm and write nothing.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from kruntimes.kubeclient.leader import LeaderElectionConfig, LeaderElector
from kruntimes.effects.runner.options import LeaderElectionOptions

if TYPE_CHECKING:
    from kruntimes.effects.runner.scheduler import Scheduler

log = logging.getLogger("kruntimes.effects.runner")


class Election:
    """One replica's campaigns for the Lease, one ``LeaderElector`` after another."""

    def __init__(self, scheduler: Scheduler, election: LeaderElectionOptions) -> None:
        self._scheduler = scheduler
        self._config = LeaderElectionConfig(
            namespace=election.namespace,
            identity=scheduler.options.identity,
            name=election.name,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
        )
        self.elector: LeaderElector | None = None
        """The current campaign's (set under the scheduler's lock)."""

    def campaign(self) -> None:
        """Campaign until the scheduler stops (on the control thread)."""
        scheduler, config = self._scheduler, self._config
        scheduler._supervisor.thread(partial(self._report_standby, config.retry_period), "standby").start()
        while not scheduler._stopping.is_set():
            elector = LeaderElector(
                scheduler._kube, config, scheduler._start_leading, self._lost, on_server_reset=scheduler._server_lost
            )
            with scheduler._lock:
                if scheduler._stopping.is_set():
                    return
                self.elector = elector
            ending = elector.run()
            if ending == "stopped":
                return
            log.warning("leadership lost; campaigning again as a standby", extra={"identity": config.identity})

    def _lost(self) -> None:
        self._scheduler._stop_leading(graceful=False, timeout=self._config.renew_deadline)

    def _report_standby(self, interval: float) -> None:
        """Log once that this replica stands by, and for whom; again only when the holder changes.

        The elector's thread blocks in ``run()``; this one reads what it last
        observed at its own retry period. A term of our own resets it, so a
        replica that lost the lease says again whom it now stands by for.
        """
        scheduler = self._scheduler
        identity = self._config.identity
        reported = ""
        while not scheduler._stopping.wait(interval):
            elector = self.elector
            if elector is None:
                continue
            if scheduler._leading or elector.is_leader():
                reported = ""
                continue
            holder = elector.observed_holder
            if holder and holder != identity and holder != reported:
                reported = holder
                log.info("standing by", extra={"identity": identity, "holder": holder})
