"""Azure Functions bindings, generated from the app named by the ``BUS_APP`` setting (the
sample app when unset): one queue trigger per endpoint, the HTTP ingress, health and the
cleanup timer (``shared.bindings``). All logic lives in ``shared/``. The configuration is
built once, here at start-up, from the app settings and the host.json beside this file
(``shared.config``).
"""

from __future__ import annotations

from pathlib import Path

import azure.functions as func

from shared import runtime
from shared.bindings import blueprint

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(blueprint(runtime.worker(Path(__file__).resolve().parent)))
