"""Starting the hosts of one drain: as tasks of the caller's event loop, or as OS processes
told to start together."""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.context
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from lab.bench.host import GO, READY, BenchHost, HostResult, HostSpec, process_main
from shared.bus.state.stores import DocumentDatabase
from shared.errors import InvalidValue
from shared.stores.account import StorageAccount


async def in_process(
    specs: list[HostSpec], raw: StorageAccount, cosmos: DocumentDatabase | None = None
) -> tuple[float, list[HostResult]]:
    """Hosts as tasks of this event loop over the caller's account (the in-memory backend),
    and over its document database for Cosmos DB endpoints."""
    hosts = [BenchHost(spec, raw, cosmos) for spec in specs]
    go = time.time()
    return go, list(await asyncio.gather(*(h.drain() for h in hosts)))


_forkserver: multiprocessing.context.ForkServerContext | None = None


def _context() -> multiprocessing.context.ForkServerContext:
    """Host processes fork from a server that has imported the bench once: starting one
    costs milliseconds instead of a fresh interpreter's imports, and every host of every
    mode starts from the same memory baseline."""
    global _forkserver
    if _forkserver is None:
        _forkserver = multiprocessing.get_context("forkserver")
        _forkserver.set_forkserver_preload(["lab.bench.host", "shared.stores.azure"])
    return _forkserver


async def _receive(conn: Connection, process: BaseProcess, what: str) -> object:
    if not await asyncio.to_thread(_wait, conn, process):
        raise InvalidValue(f"bench host {process.pid} ended (code {process.exitcode}) {what}")
    return conn.recv()


def _wait(conn: Connection, process: BaseProcess) -> bool:
    while not conn.poll(0.2):
        if not process.is_alive() and not conn.poll():
            return False
    return True


async def in_processes(
    specs: list[HostSpec], raw: StorageAccount
) -> tuple[float, list[HostResult]]:
    """One OS process per host: memory is measured per process, and two hosts really
    compete for the same queues."""
    context = _context()
    hosts: list[tuple[BaseProcess, Connection]] = []
    try:
        for spec in specs:
            ours, theirs = context.Pipe()
            started: BaseProcess = context.Process(
                target=process_main, args=(spec, theirs), daemon=True
            )
            started.start()
            theirs.close()
            hosts.append((started, ours))
        for process, conn in hosts:
            if await _receive(conn, process, "before it was ready") != READY:
                raise InvalidValue(f"bench host {process.pid} did not get ready")
        go = time.time()
        for _, conn in hosts:
            conn.send(GO)
        results = []
        for process, conn in hosts:
            data = await _receive(conn, process, "before reporting its result")
            if not isinstance(data, dict) or "error" in data:
                raise InvalidValue(f"bench host {process.pid} failed: {data}")
            results.append(HostResult(**data))
        return go, results
    finally:
        for process, conn in hosts:
            conn.close()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
