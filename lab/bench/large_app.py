"""A small app whose messages carry large bodies, for the large-body bench
(``lab.bench.payload_large``) and the tests that send bodies of many MiB through the local host.

``documents`` stores a ``StoreDocument``: its state counts the documents it processed and
their characters, so a test can see a body processed exactly once without reading it back.
With ``copies`` above 0 it also sends an ``ArchiveDocument`` holding the content that many
times to ``archive``: a handler's own large send, or one over the payload limit.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.bus import BusApp, Command, HandlerContext

app = BusApp()


class StoreDocument(Command):
    partition_by = "doc_id"
    doc_id: str
    content: str
    copies: int = Field(default=0, ge=0, le=8)


class ArchiveDocument(Command):
    partition_by = "doc_id"
    doc_id: str
    content: str


class Stored(BaseModel):
    documents: int = 0
    chars: int = 0


documents = app.endpoint("documents", state=Stored)
archive = app.endpoint("archive", state=Stored)


@documents.handles(StoreDocument)
def store(ctx: HandlerContext[Stored], doc: StoreDocument) -> None:
    ctx.state.documents += 1
    ctx.state.chars += len(doc.content)
    if doc.copies:
        archived = ArchiveDocument(doc_id=doc.doc_id, content=doc.content * doc.copies)
        ctx.send(archived, to="archive")


@archive.handles(ArchiveDocument)
def keep(ctx: HandlerContext[Stored], doc: ArchiveDocument) -> None:
    ctx.state.documents += 1
    ctx.state.chars += len(doc.content)
