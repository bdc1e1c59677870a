"""One simulated run of a user's app: the simulator's world (``lab.sim.world``) with the
user's endpoints in place of the model's, the declared or generated messages as the client's
initial sends, and observations read without the app's cooperation (audit rows, dedup
records, final states, the service calls, what the wrapped handlers did)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from lab.sim.choices import Chooser
from lab.sim.invariants import Observation, Violation, observe
from lab.sim.model import SimApp
from lab.sim.provider import ScheduledProvider
from lab.sim.readings import WINDOW_MODES
from lab.sim.world import CLIENT, AccountWrapper, Prepared, SimConfig, World
from lab.verify.checks import Outcome, check_app, parked_ids
from lab.verify.inputs import Input
from lab.verify.observed import Recorder, observed_app
from shared.bus import BusApp, Message
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.clock import ManualClock
from shared.effects.markers import performer_markers
from shared.effects.memory import InMemoryProvider
from shared.stores.account import StorageAccount


@dataclass(frozen=True)
class Target:
    """What is verified: the user's app and the messages every run starts with."""

    app: BusApp
    inputs: Sequence[Input]

    def config(self, name: str, *, copies: int = 2, concurrency: int = 2) -> SimConfig:
        """A run of the inputs with ``copies`` of each signal queued at once. The world's
        dedup window applies when any endpoint keeps one (its mode is what matters there)."""
        windowed = any(e.mode in WINDOW_MODES for e in self.app.endpoints.values())
        return SimConfig(
            name=name,
            mode="state_based" if windowed else "token",
            messages=len(self.inputs),
            copies=copies,
            concurrency=concurrency,
            partitions=1,
        )


class AppWorld(World):
    """The simulator's world over ``target``'s app. ``recorder`` holds what the fault-free
    run's handlers produced (a copy for each run), so a handler that gives another result
    for the same message and state is caught in the first run that calls it again."""

    def __init__(
        self,
        target: Target,
        config: SimConfig,
        chooser: Chooser,
        account: StorageAccount,
        clock: ManualClock,
        *,
        recorder: Recorder,
        prepared: Prepared | None = None,
        covered: Callable[[Hashable], bool] | None = None,
        wrap: AccountWrapper | None = None,
    ) -> None:
        self.target = target
        self.recorder = recorder
        self.reference_outcome: Outcome | None = None
        self.parked: dict[str, set[str]] = {}
        """endpoint -> the ids of the messages its poison queue holds, once quiet."""
        super().__init__(
            config, chooser, account, clock, prepared=prepared, covered=covered, wrap=wrap
        )

    def _build_app(self, instrumented: StorageAccount) -> SimApp:
        # Each service call is a scheduled, faulted operation against a provider that honours
        # keys or not, as the app declares it.
        at_most_once = any(s.at_most_once for s in self.target.app.services.values())
        self.provider = ScheduledProvider(
            self.instrumentation,
            self.account,
            None,
            provider=InMemoryProvider(honours_keys=not at_most_once),
        )
        providers = dict.fromkeys(self.target.app.services, self.provider)
        markers = performer_markers(instrumented) if at_most_once else None
        app = observed_app(self.target.app, self.recorder, providers, markers)
        return SimApp(app, "single", next(iter(app.endpoints)))

    def _sql_database(self) -> MemorySqlDatabase | None:
        # Endpoints that keep their rows in PostgreSQL get the simulator's in-memory model of
        # it, scheduled and faulted like storage; the others keep their tables.
        declared = self.target.app.endpoints.values()
        return MemorySqlDatabase() if any(e.store == "postgres" for e in declared) else None

    def _initial(self, number: int) -> tuple[Message, str | None]:
        given = self.target.inputs[number]
        return given.message, given.to

    async def _observe(self) -> Observation:
        self.parked = {e: await parked_ids(self.account, e) for e in self.endpoints}
        return await observe(
            self.account,
            self.endpoints,
            self.bus_config.tokens_container,
            self.config.mode,
            self._sql_rows(counted=False),
            payloads_container=self.bus_config.payloads_container,
            modes=self.modes,
            journaled=False,
        )

    async def _check(self, seen: Observation, reference: Observation) -> list[Violation]:
        wanted = self.reference_outcome or Outcome(reference, Recorder())
        return check_app(
            self.outcome(seen), wanted, client=CLIENT, residue=self.config.residue_checked
        )

    def outcome(self, seen: Observation) -> Outcome:
        ledger = [entry.key for entry in self.provider.provider.ledger]
        return Outcome(seen, self.recorder, ledger, dict(self.parked))
