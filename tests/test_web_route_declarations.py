"""Declaring the app's own web routes (``BusApp.route``, ``shared.bus.http_routes``) and
binding them (``shared.bindings``): what the host takes, and no clash with the bus's own
functions and paths."""

from __future__ import annotations

from typing import Any

import pytest

from shared import runtime
from shared.bindings import blueprint
from shared.bus import BusApp
from shared.errors import ConfigurationError
from shared.settings import resolve_settings
from tests.test_web_routes import build_app, take_note


def test_a_route_is_declared_with_a_name_path_and_methods_the_host_takes() -> None:
    app = BusApp()
    refused: list[tuple[dict[str, Any], str]] = [
        ({"path": "/orders"}, "segments of letters"),
        ({"path": "orders/{*rest}"}, "segments of letters"),
        ({"path": "a b"}, "segments of letters"),
        ({"path": "orders", "methods": ["TRACE"]}, "methods \\['TRACE'\\]"),
        ({"path": "orders", "methods": []}, "methods \\(none\\)"),
        ({"path": "orders", "name": "9lives"}, "function name"),
        ({"path": "orders", "max_body_bytes": -1}, "outside 0-"),
        ({"path": "orders", "max_body_bytes": 200 * 1024 * 1024}, "outside 0-"),
    ]
    for kwargs, error in refused:
        with pytest.raises(ConfigurationError, match=error):
            app.route(**kwargs)(take_note)
    app.route("orders")(take_note)
    with pytest.raises(ConfigurationError, match="declared twice"):
        app.route("Orders", name="again")(take_note)
    app.route("Orders", name="reading", methods=["GET"])(take_note)  # another method


@pytest.mark.parametrize(
    ("path", "name", "error"),
    [
        ("messages", "mine", "start with a path the bus or the host serves"),
        ("Console/x", "mine", "start with a path the bus or the host serves"),
        ("mine", "health", "share a function name"),
        ("mine", "Notes", "share a function name"),
    ],
)
def test_the_blueprint_refuses_a_route_that_clashes_with_a_function(
    path: str, name: str, error: str
) -> None:
    app = build_app()
    app.route(path, name=name)(take_note)
    worker = runtime.Worker(app, resolve_settings(environ={}, local_file=None))
    with pytest.raises(ConfigurationError, match=error):
        blueprint(worker)
