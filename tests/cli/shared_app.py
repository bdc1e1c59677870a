"""An app whose hub publishes an event large enough to be shared by its three subscribers'
tokens (``shared.bus.payloads``), the first of which always fails: what ``bus poison show``
is tried on with a shared body (``tests/cli/test_shared_payload_show.py``)."""

from __future__ import annotations

from tests.bus.test_shared_payloads import shouting_app

HUB, FAILING = "hubcli", "ear0cli"
app = shouting_app("cli", {FAILING: 10**9})
