"""LlamaIndex retriever over a noderag index (extra ``llamaindex``: ``pip install 'noderag[llamaindex]'``).

``NodeRAGRetriever`` is a ``llama_index.core`` ``BaseRetriever``: ``retrieve(question)`` returns one
``NodeWithScore`` per ranked passage of ``Index.retrieve``, in its order, so it plugs into
``RetrieverQueryEngine`` and the other LlamaIndex pipelines::

    from llama_index.core.query_engine import RetrieverQueryEngine
    from .llama_index import NodeRAGRetriever

    retriever = NodeRAGRetriever.from_path("my-index", k=5)
    engine = RetrieverQueryEngine.from_args(retriever, llm=my_llm)
    response = engine.query("Who designed the lighthouse?")

Each node is a ``TextNode`` whose text is the passage's best chunk and whose metadata holds the
same keys as the LangChain retriever's documents (``passage_id``, ``node_id``, ``score``, ...,
and the typed ``context``); the bulky keys (``context``, ``context_node_ids``, ``nodes``,
``query``) are excluded from what LlamaIndex shows an LLM or embeds. ``aretrieve`` runs the
retrieval in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # the optional extra is missing
    raise ImportError("noderag.integrations.llama_index needs LlamaIndex: pip install 'noderag[llamaindex]'") from exc

from .passages import BULKY_KEYS, PassageRetriever, open_index, search_config

__all__ = ["NodeRAGRetriever"]


class NodeRAGRetriever(PassageRetriever, BaseRetriever):
    """Ranked passages of a noderag index as LlamaIndex ``NodeWithScore`` objects.

    ``index`` (an opened ``noderag.Index`` or an index directory), ``k`` and ``search`` are as
    :class:`~noderag.integrations.passages.PassageRetriever` describes them; ``callback_manager``
    and ``verbose`` as for every LlamaIndex retriever.
    """

    def __init__(self, index: Any, *, k: int | None = 5, search: Any = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be an integer >= 1 (or None for every passage), got {k!r}")
        self.index = open_index(index)
        self.k = k
        self.search = search_config(search)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _nodes(self, query: str) -> list[NodeWithScore]:
        out = []
        for p in self._passages(query):
            meta = p["metadata"]
            node = TextNode(id_=f"noderag-{meta['generation']}-{meta['node_id']}", text=p["text"], metadata=meta,
                            excluded_llm_metadata_keys=list(BULKY_KEYS),
                            excluded_embed_metadata_keys=list(BULKY_KEYS))
            out.append(NodeWithScore(node=node, score=meta["score"]))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._nodes, query_bundle.query_str)
