"""The lab: everything that exercises the bus and is not deployed with it (``.funcignore``
leaves this folder out; ``function_app.py`` imports nothing from it). The simulator
(``lab.sim``), the benches (``lab.bench``, ``lab.audit.bench``, ``lab.bulk.bench``,
``lab.cleanup.bench``), the mutation runner (``lab.mutation``), the demo and its Azurite and
PostgreSQL launchers (``lab.local``), and the local Functions host with its faults
(``lab.host``)."""
