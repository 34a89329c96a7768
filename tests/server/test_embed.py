"""Embeddings through the real engine equal sentence-transformers' within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from tests.conftest import MINILM
from xinserve.v1 import inference_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

TEXTS = ["A cat sits on the mat.", "一只猫坐在垫子上。", "Quarterly revenue rose by 4%.", "x"]


async def test_embeddings_equal_sentence_transformers(api, live_server):
    reply = await api.inference.Embed(inference_pb2.EmbedRequest(model=MINILM, inputs=TEXTS))
    got = np.array([e.values for e in reply.embeddings], dtype=np.float64)
    assert [e.index for e in reply.embeddings] == [0, 1, 2, 3]
    reference = SentenceTransformer(str(live_server.runtime.models[MINILM].path), device="cpu")
    expected = reference.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=True).astype(np.float64)
    assert got.shape == (4, 384)
    assert np.max(np.abs(got - expected)) < 1e-5
    assert reply.usage.prompt_tokens > 0
    assert reply.usage.completion_tokens == 0


async def test_similar_texts_are_closer(api):
    reply = await api.inference.Embed(
        inference_pb2.EmbedRequest(model=MINILM, inputs=["a dog runs in the park", "a puppy plays outside", "tax law"])
    )
    v = np.array([e.values for e in reply.embeddings])
    assert v[0] @ v[1] > v[0] @ v[2]
