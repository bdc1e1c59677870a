"""The system demo (``python -m lab.local.demo`` without ``--single``).

Its verdict over the apps' audit rows (``count_audits``): a message lost, processed twice,
caused twice, made up or processed by another app than its destination's fails it. And the
demo itself at a small size: the sample system's three apps in three host processes over one
messaging emulator, each app's rows in its own store, with duplicates, crashes and a SIGKILL
in every host, ``payments``' host down and ``shipping``'s state emulator frozen mid-run, half
of its orders placed through ``POST /api/orders``' sessions; it passes only when nothing is
lost or doubled in any app, every cross-app message is processed once by its destination's
app, each web order has one row, and the three cleanups, run at once, leave nothing (no
session waiting or open) and report no ``bad_origin``. The verdict's own checks of a
session's audit row and of the web orders are tested apart."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from lab.local import demo
from lab.local.system_demo import Figures, SystemVerdict, count_audits

OWNER = {"orders": "a", "loyalty": "a", "shipping": "b"}


def row(message: str, *caused: tuple[str, str]) -> dict[str, object]:
    """An audit row as the stores give it: its message and what it caused (id, destination)."""
    sent = [{"id": i, "type": "T", "destination": d} for i, d in caused]
    return {"message_id": message, "caused": json.dumps(sent)}


def verdict_of(audits: dict[str, list[dict[str, object]]], roots: set[str]) -> SystemVerdict:
    verdict = SystemVerdict(apps={"a": Figures(), "b": Figures()})
    count_audits(audits, OWNER, roots, verdict)
    return verdict


def test_every_message_once_in_its_destinations_app_passes_and_is_counted_per_app() -> None:
    audits = {
        "a": [row("root", ("local", "loyalty"), ("cross", "shipping")), row("local")],
        "b": [row("cross")],
    }
    verdict = verdict_of(audits, {"root"})
    assert verdict.passed
    assert (verdict.sent, verdict.processed, verdict.cross_app) == (3, 3, 1)
    assert (verdict.apps["a"].processed, verdict.apps["a"].sent_out) == (2, 1)
    assert (verdict.apps["b"].processed, verdict.apps["b"].received) == (1, 1)


def test_a_cross_app_message_never_processed_is_lost() -> None:
    verdict = verdict_of({"a": [row("root", ("cross", "shipping"))], "b": []}, {"root"})
    assert verdict.lost == 1
    assert not verdict.passed


def test_a_message_processed_once_in_each_app_is_doubled_and_misplaced() -> None:
    audits = {"a": [row("root", ("cross", "shipping")), row("cross")], "b": [row("cross")]}
    verdict = verdict_of(audits, {"root"})
    assert verdict.doubled == 1
    assert not verdict.passed


def test_a_message_for_another_app_processed_by_the_sender_is_an_error() -> None:
    verdict = verdict_of(
        {"a": [row("root", ("cross", "shipping")), row("cross")], "b": []}, {"root"}
    )
    assert verdict.errors == ["cross for b was processed by another app"]
    assert not verdict.passed


def test_a_message_caused_twice_is_doubled_and_one_nobody_sent_is_a_ghost() -> None:
    audits = {
        "a": [row("root", ("cross", "shipping")), row("again", ("cross", "shipping"))],
        "b": [row("cross"), row("madeup")],
    }
    verdict = verdict_of(audits, {"root", "again"})
    assert (verdict.doubled, verdict.ghosts) == (1, 1)
    assert not verdict.passed


def session_row(round_id: str, *caused: tuple[str, str]) -> dict[str, object]:
    """A transactional session's audit row: what its request sent, no processing."""
    return {**row(round_id, *caused), "mode": "session"}


def test_a_session_row_counts_what_it_sent_and_is_no_processing() -> None:
    audits = {"a": [session_row("round", ("placed", "orders")), row("placed")], "b": []}
    verdict = verdict_of(audits, {"placed"})
    assert verdict.passed
    assert (verdict.sent, verdict.processed, verdict.apps["a"].processed) == (1, 1, 1)


def test_a_session_message_never_processed_is_lost() -> None:
    verdict = verdict_of({"a": [session_row("round", ("placed", "orders"))], "b": []}, set())
    assert (verdict.lost, verdict.ghosts) == (1, 0)
    assert not verdict.passed


def clients_with(web_orders: dict[str, list[str]], refused: dict[str, int]) -> demo.Clients:
    return demo.Clients(web_orders=web_orders, refused=refused)


def test_each_web_order_has_one_row_and_its_message_processed_once() -> None:
    clients = clients_with({"order0": ["m0"]}, {"refused0": 400, "again-order0": 409})
    errors = demo.web_order_errors(Counter({"order0": 1}), clients, {"m0": 1})
    assert errors == []


@pytest.mark.parametrize(
    ("rows", "audited", "refused", "says"),
    [
        ({}, {"m0": 1}, {}, "order order0 accepted at /api/orders has 0 rows"),
        ({"order0": 1}, {}, {}, "PlaceOrder m0 of order0 processed 0 times"),
        ({"order0": 1}, {"m0": 2}, {}, "PlaceOrder m0 of order0 processed 2 times"),
        ({"order0": 1, "order1": 1}, {"m0": 1}, {}, "order order1 has a row but was never"),
        ({"order0": 1}, {"m0": 1}, {"refused0": 202}, "refused0 was answered 202, not 400"),
        ({"order0": 1}, {"m0": 1}, {"again-order0": 202}, "answered 202, not 409"),
    ],
)
def test_a_web_order_lost_doubled_or_made_up_or_a_refusal_accepted_is_an_error(
    rows: dict[str, int], audited: dict[str, int], refused: dict[str, int], says: str
) -> None:
    clients = clients_with({"order0": ["m0"]}, refused)
    errors = demo.web_order_errors(Counter(rows), clients, audited)
    assert len(errors) == 1
    assert says in errors[0]


@pytest.mark.slow
def test_a_small_system_demo_passes_with_one_host_down_and_one_state_account_frozen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert demo.main(["--orders", "12", "--down-seconds", "4"]) == 0
    printed = capsys.readouterr().out
    assert "payments: host killed with SIGKILL, down for 4s" in printed
    assert "shipping: state storage stopped (SIGSTOP) for 4s" in printed
    # loyalty's rows as blob documents, shipping's in Cosmos DB: the server frozen above.
    assert "Cosmos DB container bus/shipping (partition key /id)" in printed
    # The Spark audit of the whole system read every app and matched its messages.
    for app in ("orders", "payments", "shipping"):
        assert f"app {app}: read " in printed
    assert "spark audit: exit code 0" in printed
    # Half of the orders went through POST /api/orders' sessions (the 6 less those given up
    # by their client before a commit); the audit read the storefront's rows in orders'
    # database and matched every session's PlaceOrder with its processing.
    answered = re.search(r"/api/orders: (\d) orders placed in transactional sessions", printed)
    sent = re.search(r"audit: storefront -> orders: PlaceOrder (\d)/(\d)\n", printed)
    assert answered is not None, printed
    assert sent is not None, printed
    assert int(answered[1]) <= int(sent[1]) == int(sent[2]) <= 6
    assert "after the cleanups 0 waiting, 0 open, " in printed
    last = printed.strip().splitlines()[-1]
    assert last.startswith("demo: apps=3 ")
    assert last.endswith("verdict=PASS")
    assert " lost=0 doubled=0 ghosts=0 residue=0 " in last
    assert f" web_orders={answered[1]} " in last


def test_an_order_given_up_is_carried_through_if_committed_and_found_nowhere_if_not() -> None:
    clients = demo.Clients(web_orders={"order0": ["m0"]}, abandoned={"order2", "order4"})
    committed = Counter({"order0": 1, "order2": 1})
    # The one that committed may have its row, and must then go through the whole flow.
    assert demo.web_order_errors(committed, clients, {"m0": 1}) == []
    orders = {"order0": 100, "order1": 200, "order2": 300, "order4": 500}
    placed = demo.placed_orders(orders, clients, committed)
    assert placed == {"order0": 100, "order1": 200, "order2": 300}
    # The one that did not commit has nothing anywhere; a state of it is an error.
    states: dict[str, dict[str, object]] = {
        "orders": {"order0": {}, "order2": {}},
        "payments": {"order4": {}},
    }
    errors = demo.abandoned_errors(states, placed, clients)
    assert errors == ["order order4 never committed but payments has its state"]
