"""Doors into an index from the tools people already use, each an optional extra.

- :mod:`noderag.integrations.langchain`: ``NodeRAGRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'noderag[langchain]'``);
- :mod:`noderag.integrations.llama_index`: ``NodeRAGRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'noderag[llamaindex]'``);
- :mod:`noderag.integrations.mcp`: ``noderag mcp DIR``, an MCP server for agents
  (``pip install 'noderag[mcp]'``).

Importing this package imports none of those frameworks; each module imports its own when it is
imported, and says which extra to install when it is missing. The retrievers rank exactly what
``Index.retrieve`` ranks (:mod:`noderag.integrations.passages` turns one retrieval into passages).
"""
