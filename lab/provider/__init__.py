"""A local payment provider for the lab: a real HTTP server with the idempotency rules of
Stripe's ``Idempotency-Key``, a ledger of what it applied, and fault switches (a late answer,
a 503 before applying, a connection dropped after applying). The demo charges and refunds
through it; ``docs/effects.md``, "The local payment provider", says what it imitates."""
