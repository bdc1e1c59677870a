"""Azure Functions bindings, generated from the app named by the ``BUS_APP`` setting (the
sample app when unset): one queue trigger per endpoint, the HTTP ingress, health and the
cleanup timer (``shared.bindings``). All logic lives in ``shared/``.
"""

from __future__ import annotations

import azure.functions as func

from shared import runtime
from shared.bindings import blueprint

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(blueprint(runtime.worker()))
