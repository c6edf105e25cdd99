"""LangChain retriever over a noderag index (extra ``langchain``: ``pip install 'noderag[langchain]'``).

``NodeRAGRetriever`` is a ``langchain_core`` ``BaseRetriever``: ``invoke(question)`` returns one
``Document`` per ranked passage of ``Index.retrieve``, in its order, so it drops into any LCEL
chain (``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | model``)::

    from .langchain import NodeRAGRetriever

    retriever = NodeRAGRetriever.from_path("my-index", k=5)
    docs = retriever.invoke("Who designed the lighthouse?")
    docs[0].metadata["passage_id"], docs[0].metadata["score"]

Each ``Document``'s ``page_content`` is the passage's best chunk; ``metadata`` holds ``passage_id``,
``node_id``, ``doc_id``, ``title``, ``score``, ``rank``, ``generation``, ``matched`` and the typed
``context`` of the retrieval with ``context_node_ids`` and the retrieved ``nodes``
(see :func:`noderag.integrations.passages.passages`). ``ainvoke`` runs the retrieval in a worker
thread, off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, Field, field_validator
except ImportError as exc:  # the optional extra is missing
    raise ImportError("noderag.integrations.langchain needs LangChain: pip install 'noderag[langchain]'") from exc

from .passages import PassageRetriever, open_index, search_config

__all__ = ["NodeRAGRetriever"]


class NodeRAGRetriever(PassageRetriever, BaseRetriever):
    """Ranked passages of a noderag index as LangChain ``Document`` objects.

    Fields ``index`` (an opened ``noderag.Index``, or an index directory that it opens), ``k`` and
    ``search``, as :class:`~noderag.integrations.passages.PassageRetriever` describes them.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any = Field(exclude=True)
    k: int | None = 5
    search: Any = None

    @field_validator("index", mode="before")
    @classmethod
    def _open(cls, value: Any) -> Any:
        return open_index(value)

    @field_validator("k")
    @classmethod
    def _check_k(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"k must be >= 1 (or None for every passage), got {value}")
        return value

    @field_validator("search", mode="before")
    @classmethod
    def _config(cls, value: Any) -> Any:
        return search_config(value)

    def _documents(self, query: str) -> list[Document]:
        return [Document(page_content=p["text"], metadata=p["metadata"]) for p in self._passages(query)]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(query)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        return await asyncio.to_thread(self._documents, query)
