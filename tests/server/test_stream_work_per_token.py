"""Regression guard for the front end's per-token work (no timing involved).

For one fixed request against a fake engine (``tests.server.work_counter.StreamEngine``: one
update per generated token when streaming, one final update otherwise), over the real gRPC
front end with the audit log on, the test counts:

* gRPC messages the client receives: exactly one per update (a stream), one in all (unary);
* Python-level calls made under the server's code (``service/``, ``engine_backends/``) on the
  event loop's thread, counted with ``sys.setprofile`` (``CallCounter``: Python calls and
  generator/coroutine resumptions, plus C function calls). The per-token figure is the slope
  between a short and a long request (``SHORT`` and ``LONG`` tokens), so per-call work (the
  audit records, admission, validation) cancels out.

Both counts depend only on the code path, not on the machine's speed or load: the same
request gives the same count run after run (checked below by measuring twice).

Recorded bounds (measured with this test's request, Python 3.11, grpcio 1.85.1,
prometheus-client as locked):

* GenerateStream: 44 calls per token before the per-token work was cut (a labelled metric
  child looked up and a counter advanced per update, generated text kept via setdefault,
  a generator expression per update to count tokens, the message filled field by field with
  an empty logprob conversion), 21 after; the bound is ``STREAM_CALLS_PER_TOKEN``.
* Generate (unary): 0 calls per token (the whole completion arrives as one update); bound
  ``UNARY_CALLS_PER_TOKEN``.
"""

from __future__ import annotations

import pytest

from tests.server.work_counter import fake_server, measure

pytestmark = pytest.mark.asyncio(loop_scope="session")

SHORT = 16
LONG = 272
STREAM_CALLS_PER_TOKEN = 24  # measured: 21
UNARY_CALLS_PER_TOKEN = 0.5  # measured: 0


def _expected_text(n: int) -> str:
    return "".join(f"t{i} " for i in range(n))


async def test_streamed_tokens_cost_one_message_and_a_bounded_number_of_calls_each(tmp_path):
    async with fake_server(tmp_path) as target:
        await measure(target, stream=True, tokens=4)  # first-call work (imports, caches) left out
        short = await measure(target, stream=True, tokens=SHORT)
        long = await measure(target, stream=True, tokens=LONG)
        again = await measure(target, stream=True, tokens=LONG)
    for m, n in ((short, SHORT), (long, LONG)):
        assert m.text == _expected_text(n) and m.token_ids == list(range(100, 100 + n))
        assert m.messages == n, "one message per engine update"
    assert again.calls == long.calls, "the count is deterministic"
    per_token = (long.calls - short.calls) / (LONG - SHORT)
    print(f"GenerateStream: {per_token:.2f} calls per token (bound {STREAM_CALLS_PER_TOKEN})")
    grown = long.by_function.copy()
    grown.subtract(short.by_function)
    top = ", ".join(f"{k} {v / (LONG - SHORT):.1f}" for k, v in grown.most_common(12) if v > 0)
    assert per_token <= STREAM_CALLS_PER_TOKEN, f"per-token work grew: {per_token:.2f} calls/token ({top})"


async def test_a_unary_answer_costs_no_calls_per_token(tmp_path):
    async with fake_server(tmp_path) as target:
        await measure(target, stream=False, tokens=4)
        short = await measure(target, stream=False, tokens=SHORT)
        long = await measure(target, stream=False, tokens=LONG)
    for m, n in ((short, SHORT), (long, LONG)):
        assert m.text == _expected_text(n) and m.messages == 1
    per_token = (long.calls - short.calls) / (LONG - SHORT)
    print(f"Generate: {per_token:.2f} calls per token (bound {UNARY_CALLS_PER_TOKEN})")
    assert per_token <= UNARY_CALLS_PER_TOKEN, f"unary per-token work grew: {per_token:.2f} calls/token"
