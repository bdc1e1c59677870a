"""Which ``BusApp`` this process runs: the one named by the ``BUS_APP`` setting.

``BUS_APP=package.module:attribute`` (from the environment, ``local.settings.json`` Values or
the app settings, see ``shared.settings``) is read here and nowhere else: the function app,
the local host, the CLI, the cleanup, the demo and the audit all load their endpoints through
``configured_app``. With nothing set the sample app runs. Anything that cannot be loaded is a
``ConfigurationError`` at start-up naming the setting, where it came from and what was tried.
"""

from __future__ import annotations

import importlib
import os
import sys

from shared.bus.app import BusApp
from shared.errors import ConfigurationError
from shared.settings import Settings

APP_SETTING = "BUS_APP"
DEFAULT_APP = "shared.sample.app:app"


def configured_app(settings: Settings) -> BusApp:
    """The app named by ``BUS_APP`` in ``settings``, or the sample app when it is unset."""
    reference = settings.get(APP_SETTING)
    if reference is None:
        return load_app(DEFAULT_APP, f"{APP_SETTING} unset, the default")
    return load_app(reference, f"{APP_SETTING}={reference} from the {settings.origin(APP_SETTING)}")


def load_app(reference: str, where: str | None = None) -> BusApp:
    """Import ``package.module:attribute`` and return that ``BusApp``. ``where`` says in errors
    where the reference came from."""
    where = where or f"{APP_SETTING}={reference}"
    app = load_attribute(reference, where, example=f"{APP_SETTING}={DEFAULT_APP}")
    module_name, _, attribute = reference.strip().partition(":")
    if not isinstance(app, BusApp):
        raise ConfigurationError(
            f"{where}: {module_name}.{attribute} is a {type(app).__name__}, not a BusApp"
        )
    if not app.endpoints:
        raise ConfigurationError(f"{where}: the app declares no endpoints")
    try:
        app.check()
    except ConfigurationError as e:
        raise ConfigurationError(f"{where}: {e}") from e
    return app


def load_attribute(reference: str, where: str, *, example: str) -> object:
    """Import ``package.module:attribute`` from the app's folder and return the attribute;
    ``where`` and ``example`` say in errors where the reference came from and what one looks
    like. For the app, and for what else a tool finds beside it (``bus verify``'s examples)."""
    module_name, sep, attribute = reference.strip().partition(":")
    if not sep or not module_name or not attribute.isidentifier():
        raise ConfigurationError(f"{where}: expected package.module:attribute, e.g. {example}")
    _importable_from_the_app_folder()
    module = _import(module_name, where)
    if not hasattr(module, attribute):
        raise ConfigurationError(
            f"{where}: module {module_name} ({getattr(module, '__file__', '?')}) has no "
            f"attribute {attribute!r}"
        )
    return getattr(module, attribute)


def _import(module_name: str, where: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            raise ConfigurationError(
                f"{where}: no module named {missing!r} (looked in {os.getcwd()} and on the "
                "Python path)"
            ) from e
        raise ConfigurationError(f"{where}: importing {module_name} failed: {e}") from e
    except Exception as e:
        # The user's module ran and raised: report it at start-up, with its type.
        raise ConfigurationError(
            f"{where}: importing {module_name} raised {type(e).__name__}: {e}"
        ) from e


def _importable_from_the_app_folder() -> None:
    """The Functions host imports the app from its folder; the ``bus`` console script runs
    with its own folder on the path instead, so the current folder is added (last, so it
    never shadows an installed package)."""
    folder = os.getcwd()
    if folder not in sys.path and "" not in sys.path:
        sys.path.append(folder)
