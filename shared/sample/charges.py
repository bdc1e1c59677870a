"""Where the sample's ``payments`` endpoint keeps its state, its own table in PostgreSQL, and
the service it charges through.

Apart from ``shared.sample.app`` so that the demo can read these before the app is imported
(the app reads ``SAMPLE_PAYMENTS_STORE`` when it declares its endpoints).
"""

PROVIDER = "provider"
"""The payment provider's service name (its settings: ``BUS_SERVICE_PROVIDER_*``)."""

PAYMENTS_STORE = "SAMPLE_PAYMENTS_STORE"
"""Environment variable: ``postgres`` keeps ``payments`` in PostgreSQL (default ``table``)."""

SAMPLE_SCHEMA = """
CREATE TABLE IF NOT EXISTS sample_charges (
    order_id text NOT NULL,
    payment_id text NOT NULL,
    amount_cents bigint NOT NULL,
    charged_at timestamptz NOT NULL
)
"""
"""The app's own table; no unique key on purpose, so a charge applied twice would show."""
