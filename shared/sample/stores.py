"""Where the sample's ``shipping`` and ``loyalty`` endpoints keep their rows: Table Storage
by default, or the store an environment variable names (``blob``: one JSON document per
partition in the app's state account; ``cosmos``: one Cosmos DB item per partition;
``docs/stores.md``). ``make demo`` keeps ``loyalty``'s as blob documents and ``shipping``'s
in Cosmos DB, so that every store the bus offers runs in the demo.

Apart from ``shared.sample.app`` so that the demo can read these before the app is imported
(the app reads them when it declares its endpoints), as ``PAYMENTS_STORE`` is.
"""

from __future__ import annotations

import os
from typing import cast

from shared.bus.app import Store

SHIPPING_STORE = "SAMPLE_SHIPPING_STORE"
"""Environment variable: the store of ``shipping`` (default ``table``)."""
LOYALTY_STORE = "SAMPLE_LOYALTY_STORE"
"""Environment variable: the store of ``loyalty`` (default ``table``)."""


def store_named_by(variable: str) -> Store:
    """The store the environment variable names, ``table`` when unset. An unknown value is
    refused by the endpoint's declaration itself (ConfigurationError naming it)."""
    return cast(Store, os.environ.get(variable, "table"))
