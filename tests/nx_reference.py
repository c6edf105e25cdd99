"""networkx views of noderag graphs, for tests that check kernels against networkx."""

from __future__ import annotations

import networkx as nx
import numpy as np

from noderag.graph.csr import CSR


def csr_to_nx(csr: CSR) -> nx.Graph:
    """Undirected weighted ``networkx.Graph`` of a symmetric CSR (every node, isolated ones too)."""
    g = nx.Graph()
    g.add_nodes_from(range(csr.n))
    rows = np.repeat(np.arange(csr.n), csr.degree())
    keep = rows < csr.indices
    g.add_weighted_edges_from(zip(rows[keep].tolist(), csr.indices[keep].tolist(),
                                  csr.weights[keep].astype(float).tolist()))
    return g
