"""The LangChain and LlamaIndex retrievers against the real libraries: the same passages in the same order
as ``Index.retrieve`` on the dev-sample questions, sync and async, and inside each framework's retrieval
chain with a fake model from that framework's own testing utilities."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doors import demo, dev_sample, need  # noqa: E402

from noderag.data import demo_questions  # noqa: E402
from noderag.search import SearchConfig  # noqa: E402

QUESTION = "Who founded the Vellmar Heritage Trust?"


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    return dev_sample(tmp_path_factory)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return demo(tmp_path_factory)


@pytest.fixture(scope="module")
def lc():
    need("langchain_core")
    from noderag.integrations import langchain

    return langchain


@pytest.fixture(scope="module")
def li():
    need("llama_index.core")
    from noderag.integrations import llama_index

    return llama_index


def _expected(index, q, config=None):
    r = index.retrieve(q, config=config)
    return [(p, int(n), float(s)) for p, n, s in zip(r.passages, r.passage_node_ids, r.passage_scores)]


# ---------------------------------------------------------------- LangChain

def test_langchain_same_passages_as_index_retrieve(lc, dev):
    index, questions = dev
    every = lc.NodeRAGRetriever(index=index, k=None)
    top5 = lc.NodeRAGRetriever(index=index)
    for q in questions:
        want = _expected(index, q)
        docs = every.invoke(q)
        assert [(d.metadata["passage_id"], d.metadata["node_id"], d.metadata["score"]) for d in docs] == want
        assert [d.metadata["rank"] for d in docs] == list(range(len(want)))
        assert [d.metadata["passage_id"] for d in top5.invoke(q)] == [w[0] for w in want[:5]]
    d = every.invoke(questions[0])[0]
    assert d.page_content == index.texts[d.metadata["node_id"]]
    assert d.metadata["context"] == index.retrieve(questions[0]).context
    assert {"doc_id", "title", "generation", "matched", "context_node_ids", "nodes"} <= set(d.metadata)


def test_langchain_async_and_batch_equal_sync(lc, dev):
    index, questions = dev
    r = lc.NodeRAGRetriever(index=index, k=3)
    qs = questions[:6]
    sync = [[d.metadata["passage_id"] for d in r.invoke(q)] for q in qs]

    async def run():
        return await asyncio.gather(*(r.ainvoke(q) for q in qs))

    assert [[d.metadata["passage_id"] for d in docs] for docs in asyncio.run(run())] == sync
    assert [[d.metadata["passage_id"] for d in docs] for docs in r.batch(qs)] == sync


def test_langchain_search_settings_and_validation(lc, small, tmp_path):
    cfg = {"use_ppr": False, "vector_top_k": 5}
    r = lc.NodeRAGRetriever.from_path(small.root, k=None, search=cfg)
    want = _expected(small, QUESTION, SearchConfig.from_dict(cfg))
    assert [(d.metadata["passage_id"], d.metadata["node_id"], d.metadata["score"]) for d in r.invoke(QUESTION)] == want
    assert want != _expected(small, QUESTION)  # the setting changed the ranking, so it was applied
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="k must be >= 1"):
        lc.NodeRAGRetriever(index=small, k=0)
    with pytest.raises(ValidationError, match="unknown|use_pp"):
        lc.NodeRAGRetriever(index=small, search={"use_pp": False})
    from noderag.store.tables import IndexNotFoundError

    with pytest.raises(IndexNotFoundError, match="not an index directory"):
        lc.NodeRAGRetriever(index=tmp_path)


def test_langchain_retrieval_chain_with_fake_chat_model(lc, small):
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    class Prompts(BaseCallbackHandler):
        def __init__(self):
            self.seen = []

        def on_chat_model_start(self, serialized, messages, **kwargs):
            self.seen.append(messages[0][-1].content)

        def on_llm_start(self, serialized, prompts, **kwargs):
            self.seen.extend(prompts)

    retriever = lc.NodeRAGRetriever(index=small, k=2)
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from the context."),
                                               ("human", "Context:\n{context}\n\nQuestion: {question}")])
    model = FakeListChatModel(responses=["Ilse Marren founded it in 1979."])

    def fmt(docs):
        return "\n\n".join(f"[{d.metadata['passage_id']}] {d.page_content}" for d in docs)

    chain = {"context": retriever | fmt, "question": RunnablePassthrough()} | prompt | model | StrOutputParser()
    seen = Prompts()
    assert chain.invoke(QUESTION, config={"callbacks": [seen]}) == "Ilse Marren founded it in 1979."
    top = _expected(small, QUESTION)[:2]
    assert len(seen.seen) == 1 and f"Question: {QUESTION}" in seen.seen[0]
    for pid, nid, _ in top:  # the model saw the retriever's two passages, best first
        assert f"[{pid}] {small.texts[nid]}" in seen.seen[0]
    assert seen.seen[0].index(top[0][0]) < seen.seen[0].index(top[1][0])
    assert asyncio.run(chain.ainvoke(QUESTION)) == "Ilse Marren founded it in 1979."


# ---------------------------------------------------------------- LlamaIndex

def test_llama_index_same_passages_as_index_retrieve(li, dev, small):
    index, questions = dev
    every = li.NodeRAGRetriever(index, k=None)
    for q in questions:
        got = every.retrieve(q)
        assert [(n.node.metadata["passage_id"], n.node.metadata["node_id"], n.score) for n in got] == \
            _expected(index, q)
    for q in [d["question"] for d in demo_questions()]:
        got = li.NodeRAGRetriever(small, k=4).retrieve(q)
        assert [n.node.metadata["passage_id"] for n in got] == [w[0] for w in _expected(small, q)[:4]]
    n = every.retrieve(questions[0])[0].node
    assert n.get_content() == index.texts[n.metadata["node_id"]]
    shown = n.get_content(metadata_mode="llm")
    assert "passage_id: " in shown and "context: " not in shown  # the bulky keys stay out of the prompt


def test_llama_index_async_equals_sync(li, dev):
    index, questions = dev
    r = li.NodeRAGRetriever(index, k=3)

    async def run():
        return await asyncio.gather(*(r.aretrieve(q) for q in questions[:6]))

    want = [[n.node.node_id for n in r.retrieve(q)] for q in questions[:6]]
    assert [[n.node.node_id for n in res] for res in asyncio.run(run())] == want


def test_llama_index_query_engine_with_mock_llm(li, small):
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    retriever = li.NodeRAGRetriever.from_path(small.root, k=2)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUESTION)
    top = _expected(small, QUESTION)[:2]
    assert [n.node.metadata["passage_id"] for n in response.source_nodes] == [p for p, _, _ in top]
    assert [n.score for n in response.source_nodes] == [s for _, _, s in top]
    # MockLLM without max_tokens answers with the prompt it was given: the retrieved passages are in it
    for _, nid, _ in top:
        assert small.texts[nid].split("\n")[-1][:60] in str(response)
    assert QUESTION in str(response)
    aresponse = asyncio.run(engine.aquery(QUESTION))
    assert [n.node.node_id for n in aresponse.source_nodes] == [n.node.node_id for n in response.source_nodes]
    with pytest.raises(ValueError, match="k must be"):
        li.NodeRAGRetriever(small, k=0)
