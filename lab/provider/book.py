"""The provider's books: charges and refunds applied once per idempotency key.

The rules imitate Stripe's: the first request under a key is applied and its answer saved;
the same key with the same operation and body gets the saved answer and applies nothing; the
same key with anything else is refused with 422, the status the bus's services are declared
with by default for a key reused (``ServiceDeclaration.key_reused_statuses``). A request
refused before it is applied (a malformed body, a 503) saves nothing, so its retry is a first
request. A refusal decided by the books (a declined card, a refund of an order never charged)
is saved like a success."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from shared.effects.provider import KEY_REUSED, ProviderAnswer
from shared.logsafe import problems

Operation = Literal["charge", "refund"]
BAD_REQUEST = 400
PAYMENT_REQUIRED = 402
NOT_FOUND = 404
MAX_ORDER_CHARS = 200


class ChargeBody(BaseModel):
    """``POST /v1/charges``. ``decline``: the card is declined (402), as a test card is."""

    model_config = ConfigDict(extra="forbid")
    order: str = Field(min_length=1, max_length=MAX_ORDER_CHARS)
    amount: StrictInt = Field(gt=0, le=100_000_000)
    currency: str = Field(pattern=r"^[a-z]{3}$")
    decline: StrictBool = False


class RefundBody(BaseModel):
    """``POST /v1/refunds``: give back ``amount`` of what ``order`` was charged."""

    model_config = ConfigDict(extra="forbid")
    order: str = Field(min_length=1, max_length=MAX_ORDER_CHARS)
    amount: StrictInt = Field(gt=0, le=100_000_000)


class Entry(BaseModel):
    """One application: a charge or a refund of ``amount`` for ``order`` under ``key``."""

    kind: Operation
    id: str
    key: str
    order: str
    amount: int
    currency: str | None = None


class Ledger(BaseModel):
    """What ``GET /ledger`` answers: every charge and refund in the order applied, and how
    many times each fault switch fired."""

    entries: list[Entry]
    faults: dict[str, int]


class SavedAnswer(BaseModel):
    """What a key was first used for (operation and body, as a fingerprint) and its answer."""

    fingerprint: str
    status: int
    body: dict[str, Any]


class Books(BaseModel):
    """The ledger and the saved answers; the JSON of this model is the provider's file."""

    entries: list[Entry] = []
    answers: dict[str, SavedAnswer] = {}

    def apply(self, operation: Operation, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        """The answer to ``operation`` with ``body`` under ``key`` (applied at most once)."""
        fingerprint = json.dumps([operation, body], sort_keys=True)
        saved = self.answers.get(key)
        if saved is not None:
            if saved.fingerprint != fingerprint:
                reused = _error("key used with another request", "idempotency_key_reused")
                return ProviderAnswer(KEY_REUSED, reused)
            return ProviderAnswer(saved.status, saved.body)
        try:
            answer = self._charge(body, key) if operation == "charge" else self._refund(body, key)
        except ValidationError as error:
            return ProviderAnswer(BAD_REQUEST, _error(problems(error, "body")))
        self.answers[key] = SavedAnswer(
            fingerprint=fingerprint, status=answer.status, body=answer.body
        )
        return answer

    def charged(self, order: str) -> int:
        """What ``order`` was charged, less what was refunded."""
        signs = {"charge": 1, "refund": -1}
        return sum(signs[e.kind] * e.amount for e in self.entries if e.order == order)

    def _charge(self, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        charge = ChargeBody.model_validate(body)
        if charge.decline:
            return ProviderAnswer(PAYMENT_REQUIRED, _error("card declined", "card_declined"))
        entry = self._record("charge", key, charge.order, charge.amount, charge.currency)
        return ProviderAnswer(200, entry.model_dump())

    def _refund(self, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        refund = RefundBody.model_validate(body)
        if not any(e.kind == "charge" and e.order == refund.order for e in self.entries):
            return ProviderAnswer(NOT_FOUND, _error("no charge for this order", "no_charge"))
        if refund.amount > self.charged(refund.order):
            return ProviderAnswer(BAD_REQUEST, _error("more than was charged", "over_refund"))
        entry = self._record("refund", key, refund.order, refund.amount, None)
        return ProviderAnswer(200, entry.model_dump())

    def _record(
        self, kind: Operation, key: str, order: str, amount: int, currency: str | None
    ) -> Entry:
        prefix = "ch" if kind == "charge" else "re"
        entry = Entry(
            kind=kind,
            id=f"{prefix}_{len(self.entries) + 1:06d}",
            key=key,
            order=order,
            amount=amount,
            currency=currency,
        )
        self.entries.append(entry)
        return entry


def _error(message: str, code: str = "invalid_request") -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
