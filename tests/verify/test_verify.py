"""``bus verify``'s engine on the in-memory stores: the sample passes, a state-based handler
that reads the system clock or Python's random module is named with a seed that replays it,
and the invariants read from audit rows catch what they are about."""

from __future__ import annotations

import asyncio

import pytest

from lab.sim.invariants import (
    NO_DUPLICATED_PROCESSING,
    NO_GHOST_MESSAGES,
    NO_LOST_MESSAGES,
    Delivery,
    Observation,
)
from lab.sim.model import Applied
from lab.sim.variants import DELETE_BEFORE_SEND, NO_OUTBOX_IN_COMMIT, Variant
from lab.sim.world import CLIENT
from lab.verify.checks import DETERMINISTIC_HANDLER, Outcome, check_app
from lab.verify.engine import Explorer, explore
from lab.verify.inputs import declared_inputs, generated_inputs
from lab.verify.observed import Recorder
from lab.verify.testing import assert_verified
from lab.verify.world import Target
from shared.bus import BusApp
from shared.errors import ConfigurationError
from shared.sample import app as sample
from tests.verify import apps, opaque_app


def test_the_sample_app_passes_its_examples() -> None:
    app = sample.build_app()
    target = Target(app, declared_inputs(app, sample.examples))
    report = asyncio.run(explore(target, schedules=60))
    assert report.ok, [str(v) for f in report.violations for v in f.result.violations]
    assert report.schedules == 60
    assert report.phases == [
        "exhaustive, 1 deviation(s) and 0 fault(s): stopped after 30 schedules",
        "random: 30 runs from seed 0",
    ]


@pytest.mark.parametrize(
    ("app", "handler"),
    [(apps.clock_app, "stamp_with_clock"), (apps.random_app, "stamp_with_random")],
)
def test_a_nondeterministic_state_based_handler_is_named_with_a_seed_that_replays_it(
    app: BusApp, handler: str
) -> None:
    target = Target(app, declared_inputs(app, apps.examples))
    report = asyncio.run(explore(target, schedules=2000, stop_at_first=True))
    assert not report.ok
    assert list(report.nondeterministic) == [f"tickets: {handler}"]
    seed = report.nondeterministic[f"tickets: {handler}"]
    replayed = asyncio.run(Explorer(target).replay(seed))
    found = [v for v in replayed.violations if v.invariant == DETERMINISTIC_HANDLER]
    assert found
    assert handler in found[0].detail


def test_a_deterministic_state_based_handler_passes_with_generated_messages() -> None:
    inputs = generated_inputs(apps.counting_app)
    assert [(type(i.message).__name__, i.to) for i in inputs] == [("Stamp", "tickets")]
    report = asyncio.run(explore(Target(apps.counting_app, inputs), schedules=100))
    assert report.ok, [str(v) for f in report.violations for v in f.result.violations]
    assert report.nondeterministic == {}


def test_an_endpoint_with_its_rows_in_postgres_runs_on_the_simulators_model() -> None:
    app = apps.mixed_store_app
    report = asyncio.run(explore(Target(app, declared_inputs(app, apps.examples)), schedules=40))
    assert report.ok, [str(v) for f in report.violations for v in f.result.violations]
    assert report.schedules == 40


@pytest.mark.parametrize(
    ("variant", "invariant"),
    [(DELETE_BEFORE_SEND, NO_LOST_MESSAGES), (NO_OUTBOX_IN_COMMIT, NO_LOST_MESSAGES)],
)
def test_a_broken_pipeline_is_caught_in_a_users_app(variant: Variant, invariant: str) -> None:
    app = apps.chain_app
    target = Target(app, declared_inputs(app, apps.examples))
    assert asyncio.run(explore(target, schedules=40)).ok
    report = asyncio.run(explore(target, schedules=3000, variant=variant, stop_at_first=True))
    assert not report.ok
    [found] = report.violations
    assert invariant in {v.invariant for v in found.result.violations}


def test_a_message_the_handler_refuses_in_the_fault_free_run_too_is_no_violation() -> None:
    app = apps.refusing_app
    report = asyncio.run(explore(Target(app, declared_inputs(app, apps.examples)), schedules=60))
    assert report.ok, [str(v) for f in report.violations for v in f.result.violations]


def test_an_event_example_is_published_to_its_subscribers() -> None:
    app = sample.build_app()
    placed = sample.OrderPlaced(order_id="order-2", customer="bo", amount_cents=300)
    [published] = declared_inputs(app, [placed])
    assert published.to is None
    report = asyncio.run(explore(Target(app, [published]), schedules=40))
    assert report.ok, [str(v) for f in report.violations for v in f.result.violations]
    assert report.schedules == 40


def test_generation_is_the_same_every_time() -> None:
    app = sample.build_app()
    first = [i.describe() for i in generated_inputs(app)]
    assert first == [i.describe() for i in generated_inputs(app)]
    assert len(first) == 9  # every command the sample's endpoints handle, answers aside


def test_a_model_it_cannot_generate_says_what_to_declare() -> None:
    with pytest.raises(ConfigurationError) as raised:
        generated_inputs(opaque_app.app)
    message = str(raised.value)
    assert "cannot generate Connect" in message
    assert "declare examples" in message
    assert "--examples module:attribute" in message


def test_examples_that_cannot_be_used_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not an endpoint of the app"):
        declared_inputs(apps.counting_app, [(apps.Stamp(ticket="t"), "nowhere")])
    with pytest.raises(ConfigurationError, match="non-empty list"):
        declared_inputs(apps.counting_app, [])
    with pytest.raises(ConfigurationError, match="is not a Command"):
        declared_inputs(apps.counting_app, ["Stamp"])
    with pytest.raises(ConfigurationError, match="calling it raised ZeroDivisionError"):
        declared_inputs(apps.counting_app, lambda: [1 / 0])
    [given] = declared_inputs(apps.counting_app, lambda: apps.examples)
    assert given.to == "tickets"


def test_the_pytest_helper_passes_a_good_app_and_fails_with_the_seed() -> None:
    assert_verified(apps.counting_app, examples=apps.examples, budget=None, schedules=40)
    with pytest.raises(AssertionError) as raised:
        assert_verified(apps.clock_app, examples=apps.examples, budget=None, schedules=200)
    assert "nondeterministic handler tickets: stamp_with_clock (seed verify" in str(raised.value)


def _applied(message_id: str, source: str, causation: str | None = None) -> Applied:
    return Applied(id=message_id, name=message_id, source=source, causation=causation, digest="")


def _outcome(
    applied: dict[str, list[Applied]], deliveries: list[Delivery] | None = None
) -> Outcome:
    seen = Observation(applied=applied, deliveries=deliveries or [])
    return Outcome(seen, Recorder())


def test_the_flow_invariants_judge_audit_rows_and_their_deliveries() -> None:
    reference = _outcome(
        {"a": [_applied("m0", CLIENT)], "b": [_applied("m1", "a", "m0")]},
        [Delivery("a", "m0", "m1", "b")],
    )
    assert check_app(reference, reference, client=CLIENT, residue=False) == []
    lost = _outcome({"a": [_applied("m0", CLIENT)], "b": []}, [Delivery("a", "m0", "m1", "b")])
    ghost = _outcome(
        {"a": [_applied("m0", CLIENT)], "b": [_applied("m1", "a", "m0"), _applied("m2", "a")]},
        [Delivery("a", "m0", "m1", "b")],
    )
    twice = _outcome(
        {"a": [_applied("m0", CLIENT)], "b": [_applied("m1", "a", "m0")] * 2},
        [Delivery("a", "m0", "m1", "b")],
    )
    no_input = _outcome({"a": [], "b": []})
    verdicts = {
        name: {v.invariant for v in check_app(run, reference, client=CLIENT, residue=False)}
        for name, run in (("lost", lost), ("ghost", ghost), ("twice", twice), ("none", no_input))
    }
    assert verdicts == {
        "lost": {NO_LOST_MESSAGES},
        "ghost": {NO_GHOST_MESSAGES},
        "twice": {NO_DUPLICATED_PROCESSING},
        "none": {NO_LOST_MESSAGES},
    }
