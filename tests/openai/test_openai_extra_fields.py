"""vLLM's extra request fields for structured output and LoRA reach the engine over the
OpenAI front end, or are refused: never ignored.

``regex``, ``grammar``, ``json_schema`` (object or JSON text), ``json_object``, ``choice``,
vLLM's ``structured_outputs`` object and ``lora_name`` become the contract's
``SamplingParams`` fields, so the engine gets the same constraint a gRPC caller would send;
a wrong JSON type, two constraints (chat's ``response_format`` counting as one), vLLM's
removed ``guided_*`` fields and ``structured_outputs`` options this server cannot honour are
400s naming the field; an unknown ``lora_name`` is the gRPC path's NOT_FOUND, a 404.

Real uvicorn listener, call core and audit log over a fake engine that records the
``SamplingOptions`` it was given (``tests.server.fake_http``); two checks on the session's
real tiny model show the constraint shaping the output.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from engine_backends.protocol import GenerateInput, GenerationUpdate, SamplingOptions, StructuredOutput
from service.runtime.state import AdapterEntry
from tests.conftest import TINY
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines

ASYNC = pytest.mark.asyncio(loop_scope="session")

COMPLETION: dict[str, Any] = {"model": "m", "prompt": "My number is", "max_tokens": 5, "temperature": 0}
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
BASES = {"completions": COMPLETION, "chat/completions": CHAT}


class RecordingEngine(FakeEngine):
    """A ``FakeEngine`` that keeps the ``SamplingOptions`` of every generation, by request id."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: dict[str, SamplingOptions] = {}

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self.seen[request.request_id] = request.sampling
        async for update in super().generate(request):
            yield update


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(tmp_path_factory):
    """One listener over a recording engine ``m`` that has one servable LoRA adapter ``a``."""
    engine = RecordingEngine("m")
    tmp = tmp_path_factory.mktemp("extra-fields")
    async with http_over_fake_engines(tmp, [engine]) as (port, runtime):
        adapter_dir = Path(tmp) / "adapter-a"
        runtime.models["m"].adapters["a"] = AdapterEntry("a", adapter_dir, load_path=adapter_dir)
        yield f"http://127.0.0.1:{port}", engine


async def _post(base: str, endpoint: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        return await client.post(f"/v1/{endpoint}", json=body)


async def _sampling(served, endpoint: str, extra: dict[str, Any]) -> SamplingOptions:
    """What the engine received for a request of ``endpoint`` with ``extra`` merged in."""
    base, engine = served
    reply = await _post(base, endpoint, {**BASES[endpoint], **extra})
    assert reply.status_code == 200, reply.text[:500]
    request_id = reply.headers["x-request-id"]
    assert request_id in engine.seen, "the engine was not called for this request"
    return engine.seen[request_id]


def _refusal(reply: httpx.Response, status: int) -> dict[str, Any]:
    """The OpenAI error object of ``reply``, after checking what every refusal must hold."""
    assert reply.status_code == status, (reply.status_code, reply.text[:500])
    assert reply.headers.get("x-request-id")
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    for leak in ("Traceback", "site-packages", ".py", "/work", "pydantic"):
        assert leak not in reply.text, (leak, reply.text[:500])
    return error


# -- applied --------------------------------------------------------------------------------

# case → (field(s) merged into the body, the constraint the engine must get)
APPLIED: dict[str, tuple[dict[str, Any], StructuredOutput]] = {
    "regex": ({"regex": "[0-9]{3}"}, StructuredOutput("regex", "[0-9]{3}")),
    "grammar": ({"grammar": 'root ::= "yes" | "no"'}, StructuredOutput("grammar", 'root ::= "yes" | "no"')),
    "choice": ({"choice": ["yes", "no"]}, StructuredOutput("choice", ("yes", "no"))),
    "json_object": ({"json_object": True}, StructuredOutput("json_object", True)),
    "json_schema-text": ({"json_schema": '{"type": "object"}'}, StructuredOutput("json_schema", '{"type": "object"}')),
    "vllm-regex": ({"structured_outputs": {"regex": "a+"}}, StructuredOutput("regex", "a+")),
    "vllm-choice": ({"structured_outputs": {"choice": ["x", "y"]}}, StructuredOutput("choice", ("x", "y"))),
    "vllm-grammar": ({"structured_outputs": {"grammar": 'root ::= "a"'}}, StructuredOutput("grammar", 'root ::= "a"')),
    "vllm-json_object": ({"structured_outputs": {"json_object": True}}, StructuredOutput("json_object", True)),
}


@ASYNC
@pytest.mark.parametrize("endpoint", list(BASES))
@pytest.mark.parametrize("case", list(APPLIED))
async def test_structured_output_fields_reach_the_engine(served, endpoint, case):
    extra, expected = APPLIED[case]
    sampling = await _sampling(served, endpoint, extra)
    assert sampling.structured_output == expected


SCHEMA = {"type": "object", "properties": {"名": {"type": "string"}}, "required": ["名"]}


@ASYNC
@pytest.mark.parametrize(
    "extra", [{"json_schema": SCHEMA}, {"structured_outputs": {"json": SCHEMA}}], ids=["top", "vllm"]
)
async def test_json_schema_object_is_sent_as_its_json_text(served, extra):
    """A JSON Schema given as an object reaches the engine as the contract's JSON text."""
    sampling = await _sampling(served, "completions", extra)
    so = sampling.structured_output
    assert so is not None and so.kind == "json_schema"
    assert isinstance(so.value, str) and json.loads(so.value) == SCHEMA


@ASYNC
async def test_null_structured_fields_are_absent(served):
    extra = {"regex": None, "choice": None, "json_schema": None, "structured_outputs": None, "lora_name": None}
    sampling = await _sampling(served, "completions", extra)
    assert sampling.structured_output is None and sampling.lora_name is None


@ASYNC
@pytest.mark.parametrize("endpoint", list(BASES))
async def test_known_lora_name_reaches_the_engine(served, endpoint):
    sampling = await _sampling(served, endpoint, {"lora_name": "a"})
    assert sampling.lora_name == "a"


@ASYNC
@pytest.mark.parametrize("endpoint", list(BASES))
async def test_unknown_lora_name_is_404(served, endpoint):
    base, engine = served
    reply = await _post(base, endpoint, {**BASES[endpoint], "lora_name": "no-such-adapter"})
    error = _refusal(reply, 404)
    assert error["type"] == "not_found_error"
    assert "no-such-adapter" in error["message"]
    assert reply.headers["x-request-id"] not in engine.seen


# -- refused --------------------------------------------------------------------------------

# case → (endpoint, fields merged into its base body, param named, words the message must hold)
REFUSED: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "regex-integer": ("completions", {"regex": 5}, "regex", "expected a string, but got an integer"),
    "grammar-array": ("chat/completions", {"grammar": ["a"]}, "grammar", "expected a string, but got an array"),
    "json_object-string": ("completions", {"json_object": "true"}, "json_object", "expected a boolean"),
    "json_schema-number": ("completions", {"json_schema": 3}, "json_schema", "expected an object or a string"),
    "choice-string": ("chat/completions", {"choice": "yes"}, "choice", "expected an array, but got a string"),
    "choice-element": ("completions", {"choice": ["yes", 2]}, "choice[1]", "expected a string, but got an integer"),
    "lora_name-integer": ("completions", {"lora_name": 1}, "lora_name", "expected a string, but got an integer"),
    "vllm-not-object": ("completions", {"structured_outputs": "regex"}, "structured_outputs", "expected an object"),
    "vllm-regex-integer": (
        "completions",
        {"structured_outputs": {"regex": 1}},
        "structured_outputs.regex",
        "expected a string",
    ),
    "two-fields": ("completions", {"regex": "a", "choice": ["b"]}, "regex", "got regex, choice"),
    "field-and-vllm": (
        "chat/completions",
        {"grammar": 'root ::= "a"', "structured_outputs": {"regex": "a"}},
        "grammar",
        "got grammar, structured_outputs.regex",
    ),
    "vllm-two": (
        "completions",
        {"structured_outputs": {"regex": "a", "json_object": True}},
        "structured_outputs.regex",
        "got structured_outputs.regex, structured_outputs.json_object",
    ),
    "field-and-response_format": (
        "chat/completions",
        {"regex": "a", "response_format": {"type": "json_object"}},
        "regex",
        "got regex, response_format",
    ),
    "schema-and-response_format": (
        "chat/completions",
        {"json_schema": {}, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
        "json_schema",
        "got json_schema, response_format",
    ),
    "vllm-empty": ("completions", {"structured_outputs": {}}, "structured_outputs", "needs one of json, regex"),
    "vllm-option": (
        "completions",
        {"structured_outputs": {"regex": "a", "disable_any_whitespace": True}},
        "structured_outputs.disable_any_whitespace",
        "is not supported",
    ),
    "guided_regex": ("completions", {"guided_regex": "a"}, "guided_regex", "use regex instead"),
    "guided_json": ("chat/completions", {"guided_json": {}}, "guided_json", "use json_schema instead"),
    "guided_choice": ("completions", {"guided_choice": ["a"]}, "guided_choice", "use choice instead"),
    "guided_grammar": ("completions", {"guided_grammar": "x"}, "guided_grammar", "use grammar instead"),
    "regex-empty": ("completions", {"regex": ""}, "regex", "must not be empty"),
    "json_schema-empty": ("chat/completions", {"json_schema": ""}, "json_schema", "must not be empty"),
    "vllm-grammar-empty": (
        "completions",
        {"structured_outputs": {"grammar": ""}},
        "structured_outputs.grammar",
        "must not be empty",
    ),
    "choice-empty": ("completions", {"choice": []}, "choice", "at least one choice"),
    "json_object-false": ("completions", {"json_object": False}, "json_object", "only true is meaningful"),
}


@ASYNC
@pytest.mark.parametrize("case", list(REFUSED))
async def test_bad_extra_fields_are_400_naming_the_field(served, case):
    endpoint, extra, param, words = REFUSED[case]
    base, engine = served
    reply = await _post(base, endpoint, {**BASES[endpoint], **extra})
    error = _refusal(reply, 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert words in error["message"], error["message"]
    assert reply.headers["x-request-id"] not in engine.seen


# -- the real tiny model --------------------------------------------------------------------


async def _real_completion(http_server, extra: dict[str, Any]) -> str:
    async with httpx.AsyncClient(base_url=http_server.base_url, timeout=600) as client:
        reply = await client.post(
            "/completions", json={"model": TINY, "prompt": "My number is", "max_tokens": 5, "temperature": 0, **extra}
        )
    assert reply.status_code == 200, reply.text[:500]
    return reply.json()["choices"][0]["text"]


@ASYNC
async def test_real_model_choice_gives_one_of_them(http_server):
    assert await _real_completion(http_server, {"choice": ["yes", "no"]}) in {"yes", "no"}


@ASYNC
async def test_real_model_regex_gives_three_digits(http_server):
    text = await _real_completion(http_server, {"regex": "[0-9]{3}"})
    assert re.fullmatch("[0-9]{3}", text), text
