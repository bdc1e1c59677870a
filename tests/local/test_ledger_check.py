"""The demo's verdict from the provider's ledger, on ledgers built here: a good one passes,
and each way of charging or refunding wrongly fails with a line that names the order."""

from __future__ import annotations

import subprocess
import sys

from lab.local import demo
from lab.local.ledger_check import check_ledger
from lab.provider.book import Entry, Ledger

PLACED = {"o1": 1200, "o2": 500, "late1": 700, "late2": 300}
LATE = {"late2": 300}
"""late2's payment came after its timeout: it must be refunded; late1's came in time."""


def charge(order: str, key: str | None = None, amount: int | None = None) -> Entry:
    return Entry(
        kind="charge",
        id=f"ch_{order}",
        key=key or f"k-{order}",
        order=order,
        amount=PLACED[order] if amount is None else amount,
        currency="eur",
    )


def refund(order: str, key: str | None = None) -> Entry:
    return Entry(kind="refund", id=f"re_{order}", key=key or f"r-{order}", order=order, amount=300)


def good() -> list[Entry]:
    return [charge(o) for o in PLACED] + [refund("late2")]


def check(entries: list[Entry]) -> list[str]:
    ledger = Ledger(entries=entries, faults={"late": 2, "unavailable": 3, "drop": 1})
    return check_ledger(ledger, PLACED, LATE).errors


def test_a_ledger_with_each_order_charged_once_and_the_late_payment_refunded_passes() -> None:
    ledger = Ledger(entries=good(), faults={"late": 2, "unavailable": 3, "drop": 1})
    checked = check_ledger(ledger, PLACED, LATE)
    assert checked.errors == []
    assert (checked.charges, checked.refunds, checked.faults) == (4, 1, 6)


def test_an_order_charged_twice_under_two_keys_fails() -> None:
    errors = check([*good(), charge("o1", key="k-o1-again")])
    assert errors == ["order o1: 2 charges in the ledger (k-o1, k-o1-again)"]


def test_one_key_applied_twice_fails() -> None:
    errors = check([*good(), charge("o1")])
    assert "key k-o1 applied 2 times" in errors


def test_an_order_never_charged_fails() -> None:
    errors = check([e for e in good() if e.order != "o2"])
    assert errors == ["order o2: 0 charges in the ledger (none)"]


def test_a_charge_of_another_amount_fails() -> None:
    entries = [charge("o1", amount=2400), *good()[1:]]
    assert check(entries) == ["order o1: charge of 2400, not 1200"]


def test_a_charge_for_an_order_never_placed_fails_with_its_name_escaped() -> None:
    ghost = Entry(kind="charge", id="ch_x", key="k-x", order="o9\nPASS", amount=1, currency="eur")
    errors = check([*good(), ghost])
    assert errors == ["charge for order o9\\nPASS, which was not placed"]


def test_a_late_payment_refunded_twice_or_not_at_all_fails() -> None:
    twice = check([*good(), refund("late2", key="r-late2-again")])
    never = check([e for e in good() if e.kind == "charge"])
    assert twice == ["order late2: 2 refunds in the ledger (r-late2, r-late2-again)"]
    assert never == ["order late2: 0 refunds in the ledger (none)"]


def test_a_refund_of_a_payment_made_in_time_fails() -> None:
    errors = check([*good(), refund("late1")])
    assert errors == ["refund for order late1, which has no late payment"]


def test_the_demo_still_imports_and_shows_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lab.local.demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--provider-faults" in done.stdout


def test_the_demo_expects_refunds_for_the_orders_its_timeouts_cancelled_only() -> None:
    # The checkouts are completed either way: an order cancelled by its timeout is one that
    # was never shipped.
    states: dict[str, dict[str, dict[str, object]]] = {
        "shipping": {"late1": {"shipment_id": "s1"}, "late2": {}}
    }
    immediate = {"o1": 1200, "o2": 500}
    pay_later = {"late1": 700, "late2": 300}
    ledger = Ledger(entries=good(), faults={"late": 2, "unavailable": 3, "drop": 1})

    checked = demo.ledger_check(ledger, states, immediate, pay_later)
    states["shipping"]["late1"] = {}  # not shipped: cancelled, so its payment must be refunded
    unrefunded = demo.ledger_check(ledger, states, immediate, pay_later)

    assert checked.errors == []
    assert unrefunded.errors == ["order late1: 0 refunds in the ledger (none)"]
    verdict = demo.Verdict(1, 1, 0, 0, 0, 0, [], checked.charges, checked.refunds, checked.faults)
    assert "charges=4 refunds=1 provider_faults=6 verdict=PASS" in verdict.line()
