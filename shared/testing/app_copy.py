"""The user's app as the kit runs it: a copy, so that the module-level app object a test
imports stays as the user declared it, with the bus's performer calling in-memory providers.

The product adds its performer to the app object itself (``shared.effects.wiring``) with a
provider per service over HTTP; a copy lets every test add its own performer with fresh
providers, which the same app object could hold only once."""

from __future__ import annotations

from dataclasses import replace

from shared.bus.app import BusApp
from shared.bus.effects import EffectRequest
from shared.effects.addresses import EffectSettings
from shared.effects.markers import performer_markers
from shared.effects.memory import InMemoryProvider
from shared.effects.performer import add_performer
from shared.stores.account import StorageAccount


def copied_app(app: BusApp) -> BusApp:
    """A new app with ``app``'s endpoints, external endpoints and services. A performer the
    app already holds is left out when it declares services: the kit adds its own."""
    copy = BusApp(name=app.name)
    copy.services.update(app.services)
    copy.routes.external.update(app.routes.external)
    for name, endpoint in app.endpoints.items():
        if EffectRequest.type_name() in endpoint.handlers and app.services:
            continue
        copy.endpoints[name] = replace(
            endpoint,
            routes=copy.routes,
            handlers=dict(endpoint.handlers),
            former_names=dict(endpoint.former_names),
        )
    copy.check()
    return copy


def with_memory_performer(app: BusApp, account: StorageAccount) -> dict[str, InMemoryProvider]:
    """Add the performer to ``app`` (a copy) with one in-memory provider per declared
    service, retried as the product retries (``EffectSettings``' defaults), its
    at-most-once markers on ``account``; the providers by service name."""
    if not app.services:
        return {}
    providers = {
        name: InMemoryProvider(honours_keys=not declared.at_most_once)
        for name, declared in app.services.items()
    }
    defaults = EffectSettings()
    add_performer(
        app,
        providers,
        call_timeout=defaults.call_cap_seconds,
        retry=defaults.retry_policy(),
        markers=performer_markers(account),
    )
    return providers
