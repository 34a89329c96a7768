"""vLLM's logprobs read as the engine's ``TokenLogprob`` lists (lazily, ``LogprobPositions``)
and built into protobuf: the same content in vLLM's flat and dict forms, and never more than
a bounded number of candidates converted per event-loop iteration (counted, not timed)."""

from __future__ import annotations

import asyncio
import itertools
import random

from vllm.logprobs import append_logprobs_for_next_position, create_prompt_logprobs, create_sample_logprobs

from engine_backends import logprob_positions as lp
from engine_backends import vllm_compat as vc
from engine_backends.logprob_positions import LogprobPositions
from engine_backends.protocol import CompletionChunk, TokenLogprob
from service.core import convert
from xinserve.v1 import inference_pb2


def _sample_logprobs(flat: bool, positions: int, top: int, seed: int = 7):
    """Logprobs as vLLM's LogprobsProcessor records them (vllm.logprobs helpers): per position
    the sampled token, then the top ``top`` candidates; the sampled token is among them about
    half of the time."""
    rng = random.Random(seed)
    container = create_sample_logprobs(flat)
    for _ in range(positions):
        ids = rng.sample(range(1000), top)
        sampled = rng.choice(ids) if rng.random() < 0.5 else rng.randrange(1000, 2000)
        rank = ids.index(sampled) + 1 if sampled in ids else rng.randrange(top + 1, 500)
        tokens = [sampled, *ids]
        append_logprobs_for_next_position(
            container, tokens, [-0.5 * t for t in tokens], [f"<{t}>" for t in tokens], rank, top
        )
    return container


def test_flat_and_dict_forms_convert_alike():
    flat = LogprobPositions(_sample_logprobs(True, 300, 5))
    listed = LogprobPositions(_sample_logprobs(False, 300, 5))
    assert flat == listed and list(flat) == list(listed)
    assert len(flat) == 300
    for position in flat:
        ids = [c.token_id for c in position]
        assert len(ids) == len(set(ids)), "each candidate once per position"
        assert 5 <= len(position) <= 6
        assert all(c.decoded_token == f"<{c.token_id}>" and c.logprob == -0.5 * c.token_id for c in position)
    # The sampled token comes first; a sampled token outside the top 5 has rank > 5.
    assert any(p[0].rank > 5 for p in flat) and any(p[0].rank <= 5 for p in flat)
    assert flat[7] == list(flat)[7] and flat[-1] == list(flat)[-1]
    assert list(flat[10:20]) == list(flat)[10:20]


def test_prompt_logprobs_first_position_is_empty():
    prompt = create_prompt_logprobs(True)
    append_logprobs_for_next_position(prompt, [3, 4], [-1.0, -0.25], ["c", "d"], 2, 1)
    assert lp.logprob_positions(prompt) == [
        [],
        [TokenLogprob(3, -1.0, 2, "c"), TokenLogprob(4, -0.25, 1, "d")],
    ]
    assert lp.logprob_positions(None) is None


def test_nothing_is_made_before_it_is_read(monkeypatch):
    made = 0
    real = lp.TokenLogprob

    def counting(*args):
        nonlocal made
        made += 1
        return real(*args)

    monkeypatch.setattr(lp, "TokenLogprob", counting)
    positions = lp.logprob_positions(_sample_logprobs(True, 1000, 20))
    assert positions is not None and len(positions) == 1000 and made == 0
    first = next(iter(positions))
    assert made == len(first) <= 21


async def _run_counting_iterations(work, counter):
    """Run ``work`` while a ticker task records ``counter()`` once per event-loop iteration;
    returns work's result and the largest increase of ``counter`` between two ticks."""
    seen: list[int] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            seen.append(counter())
            await asyncio.sleep(0)

    task = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)  # the ticker's first tick
    try:
        result = await work
    finally:
        stop = True
        await task
    seen.append(counter())
    return result, max(b - a for a, b in itertools.pairwise(seen))


def test_a_whole_completion_is_built_a_bounded_slice_per_loop_iteration(monkeypatch):
    made = 0
    real = lp.TokenLogprob

    def counting(*args):
        nonlocal made
        made += 1
        return real(*args)

    monkeypatch.setattr(lp, "TokenLogprob", counting)
    # One reply's worth: 2,000 positions x (20 + 1) candidates, read lazily from vLLM's container.
    chunk = CompletionChunk(index=0, text="", token_ids=list(range(2000)))
    chunk.logprobs = lp.logprob_positions(_sample_logprobs(True, 2000, 20))
    out = inference_pb2.CompletionOutput()

    async def main():
        return await _run_counting_iterations(convert.fill_completion_output_bounded(out, chunk), lambda: made)

    _, most_per_iteration = asyncio.run(main())
    assert made == sum(len(p.candidates) for p in out.logprobs) > 40_000
    assert most_per_iteration <= convert.SLICE_ENTRIES + 21  # the slice, plus the position that ends it


def test_protobuf_conversion_yields_to_the_loop():
    positions = [[TokenLogprob(t, -1.0, r + 1, "x") for r, t in enumerate(range(21))] for _ in range(3000)]
    chunk = CompletionChunk(index=0, text="", token_ids=list(range(3000)), logprobs=positions, cumulative_logprob=-3.0)
    out = inference_pb2.CompletionOutput()

    async def main():
        work = convert.fill_completion_output_bounded(out, chunk)
        return await _run_counting_iterations(work, lambda: 21 * len(out.logprobs))

    _, most_per_iteration = asyncio.run(main())
    assert most_per_iteration <= convert.SLICE_ENTRIES
    assert out == convert.completion_output(chunk)
    assert len(out.logprobs) == 3000 and out.cumulative_logprob == -3.0


def test_the_output_handler_passes_through_the_loop_once_per_engine_step():
    """vLLM's output handler loops on ``engine_core.get_output_async()``, which returns at once
    while engine steps are queued; wrapped, every fetch passes through the event loop first."""

    class QueuedSteps:  # the AsyncMPClient surface the handler uses, with steps already queued
        def __init__(self, steps: int) -> None:
            self.queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(steps):
                self.queue.put_nowait(i)

        async def get_output_async(self) -> int:
            return await self.queue.get()

    async def main(wrapped: bool) -> int:
        client = QueuedSteps(50)
        if wrapped:
            vc.yield_between_engine_steps(client)
        fetched = 0

        async def handler() -> None:  # as AsyncLLM's output handler: fetch, process, fetch ...
            nonlocal fetched
            for _ in range(50):
                await client.get_output_async()
                fetched += 1

        _, most = await _run_counting_iterations(handler(), lambda: fetched)
        return most

    assert asyncio.run(main(wrapped=False)) == 50  # every queued step in one loop iteration
    assert asyncio.run(main(wrapped=True)) == 1
