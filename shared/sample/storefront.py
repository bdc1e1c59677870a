"""The sample's storefront: ``POST /api/orders`` records a web client's order and sends
PlaceOrder to ``orders`` in one transactional session (``docs/sessions.md``) on the endpoint
``storefront``: the order row and the message commit together, or neither does.

The request: a JSON body ``{"order_id", "customer", "amount_cents"}`` (``NewOrder``) and an
``Idempotency-Key`` header (required), read by the HTTP ingress's rules and in its sender
scopes (``shared.web``). The answer: 202 with ``{"order_id", "message_ids", "deduplicated":
false}``; a retry under the same key for the same order, 200 with the first request's message
ids and ``"deduplicated": true`` (nothing written or sent anew); 400 for a bad body or key;
409 when the order id was placed under another key; 503 to retry with the same key.

Where the order row goes: on Table Storage (the default) it is the entity ``(order_id,
"order")`` of the endpoint's own table, in the session's partition; with
``SAMPLE_STOREFRONT_STORE=postgres`` the endpoint keeps its rows in PostgreSQL and the order is
a row of the sample's own table ``sample_orders`` (``ORDERS_SCHEMA``), written through the
session's connection inside its transaction. The handler itself is in ``shared.sample.app``
(it sends the app's PlaceOrder).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from shared.bus.session import Session
from shared.stores.table import Entity, TableValue
from shared.web import WebError, WebResponse

STOREFRONT = "storefront"
"""The endpoint whose sessions the orders are placed in."""
STOREFRONT_STORE = "SAMPLE_STOREFRONT_STORE"
"""Environment variable: ``postgres`` keeps ``storefront`` in PostgreSQL (default ``table``)."""
ORDER_ROW = "order"
"""The order's row key in its partition of the endpoint's table (Table Storage)."""
ORDERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sample_orders (
    order_id text PRIMARY KEY,
    customer text NOT NULL,
    amount_cents bigint NOT NULL,
    placed_at timestamptz NOT NULL
)
"""
"""The sample's own table of orders (PostgreSQL): one row per order id."""
MAX_AMOUNT_CENTS = 10**9

_ORDER_ID = r"^[A-Za-z0-9._:-]{1,100}$"
_CUSTOMER = r"^[^/\\#?\x00-\x1f\x7f-\x9f]{1,100}$"
"""A customer names OrderPlaced's partition: no character a table key refuses."""


class NewOrder(BaseModel):
    """The body of ``POST /api/orders``; nothing else is accepted, nothing is coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    order_id: str = Field(pattern=_ORDER_ID)
    customer: str = Field(pattern=_CUSTOMER)
    amount_cents: int = Field(gt=0, le=MAX_AMOUNT_CENTS)


async def record_order(session: Session, order: NewOrder, placed_at: datetime) -> None:
    """The order's row, committed with the session: an entity of its partition on Table
    Storage, a row of ``sample_orders`` through the session's connection on PostgreSQL."""
    if session.sql is None:
        fields: dict[str, TableValue] = {
            "customer": order.customer,
            "amount_cents": order.amount_cents,
            "placed_at": placed_at,
        }
        session.insert(Entity(order.order_id, ORDER_ROW, fields))
        return
    try:
        await session.sql.execute(
            "INSERT INTO sample_orders (order_id, customer, amount_cents, placed_at) "
            "VALUES ($1, $2, $3, $4)",
            order.order_id,
            order.customer,
            order.amount_cents,
            placed_at,
        )
    except asyncpg.UniqueViolationError:
        # Placed before under another key (the same key is deduplicated before this): the
        # session rolls back, nothing is sent.
        raise WebError(409, f"order {order.order_id} was placed by another request") from None


def order_answer(order: NewOrder, session: Session) -> WebResponse:
    """202 for an order placed now, 200 for a retry answered with the first one's ids."""
    body: dict[str, Any] = {
        "order_id": order.order_id,
        "message_ids": list(session.message_ids),
        "deduplicated": session.deduplicated,
    }
    return WebResponse.json(200 if session.deduplicated else 202, body)
