"""Where the sample's ``payments`` endpoint keeps its state, the sample's own tables in
PostgreSQL, and the service it charges through.

Apart from ``shared.sample.app`` so that the demo can read these before the app is imported
(the app reads ``SAMPLE_PAYMENTS_STORE`` when it declares its endpoints).
"""

from shared.sample.storefront import ORDERS_SCHEMA

PROVIDER = "provider"
"""The payment provider's service name (its settings: ``BUS_SERVICE_PROVIDER_*``)."""

PAYMENTS_STORE = "SAMPLE_PAYMENTS_STORE"
"""Environment variable: ``postgres`` keeps ``payments`` in PostgreSQL (default ``table``)."""

CHARGES_SCHEMA = """
CREATE TABLE IF NOT EXISTS sample_charges (
    order_id text NOT NULL,
    payment_id text NOT NULL,
    amount_cents bigint NOT NULL,
    charged_at timestamptz NOT NULL
)
"""
"""The app's own table of charges; no unique key on purpose, so a charge applied twice would
show."""
SAMPLE_SCHEMA = f"{CHARGES_SCHEMA};{ORDERS_SCHEMA}"
"""Every table of the sample's own, created by the demo beside the bus schema: its charges and
the storefront's orders (``shared.sample.storefront``)."""
