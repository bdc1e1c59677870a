"""The product's performer: added to a loaded app that declares services, with an
``HttpProvider`` per service from the app's configuration (``docs/effects.md``).

An app is usually a module-level global (the sample app, a user's ``BUS_APP``), so more than
one worker of a process may be built for the same app object (the function app's, a tool's).
The performer is added once per app object; a later worker for the same app reuses it and
its ``HttpClient``. An app that added its own performer (with providers of its own, as a test
or the simulator does) keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from weakref import WeakKeyDictionary

from shared.bus.app import BusApp
from shared.bus.effects import EffectRequest
from shared.config import AppConfig
from shared.effects.addresses import setting_name, url_setting
from shared.effects.http import HttpClient, HttpProvider
from shared.effects.markers import performer_markers
from shared.effects.performer import add_performer
from shared.errors import ConfigurationError
from shared.stores.account import StorageAccount

_performers: WeakKeyDictionary[BusApp, HttpClient] = WeakKeyDictionary()


def wire_performer(
    app: BusApp, config: AppConfig, account: Callable[[], StorageAccount]
) -> HttpClient | None:
    """Add the performer endpoint to ``app`` if it declares services and has none yet; the
    client its providers call through (None: ``app`` declares no service, or brought its
    own performer). ``account`` gives the storage account of the at-most-once markers when
    the first is needed. A declared service without its URL setting is a
    ConfigurationError."""
    if not app.services:
        return None
    performer = config.bus.performer_endpoint
    if app in _performers:
        if performer not in app.endpoints:
            raise ConfigurationError(
                f"the app's performer was added under another app name than this worker's "
                f"({performer}): one app object runs under one name"
            )
        return _performers[app]
    existing = app.endpoints.get(performer)
    if existing is not None:
        if EffectRequest.type_name() in existing.handlers:
            return None
        raise ConfigurationError(
            f"the app declares services, and its endpoint {performer} is not the "
            "performer: that name is the bus's own, rename the endpoint"
        )
    _check_setting_names(app)
    effects = config.effects
    cap = effects.call_cap_seconds
    if cap <= 0:
        raise ConfigurationError(
            f"host.json's functionTimeout leaves no time for a call to a service once the "
            f"receive's storage calls are counted (cap {cap:g} s): raise functionTimeout or "
            "lower BUS_STORAGE_CALL_TIMEOUT (docs/effects.md, section 4)"
        )
    client = HttpClient()
    providers = {
        name: HttpProvider(
            declared, effects.address_of(name), client, max_bytes=effects.answer_max_bytes
        )
        for name, declared in app.services.items()
    }
    add_performer(
        app,
        providers,
        call_timeout=cap,
        retry=effects.retry_policy(),
        markers=performer_markers(account, performer),
        name=performer,
    )
    _performers[app] = client
    return client


def _check_setting_names(app: BusApp) -> None:
    """Two services whose names differ by '-' and '_' would read the same settings."""
    seen: dict[str, str] = {}
    for name in app.services:
        other = seen.setdefault(setting_name(name), name)
        if other != name:
            raise ConfigurationError(
                f"services {other} and {name} would both read {url_setting(name)}: rename one"
            )
