"""What is served is what was verified, LoRA adapters included; a dead engine is never healthy.

One server over the real vLLM engine (CPU) serves a copy of the built-in tiny Llama, signed
for this test, with four LoRA adapters: ``good`` (signed), ``unsigned``, ``tampered`` (signed,
then its weights changed) and ``toctou`` (signed; its weights are replaced after the server
verified them). While the server loads, right after the model verified, the model's
``chat_template.jinja`` is changed in place. The last test kills the engine's
``VLLM::EngineCore`` process with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from audit import QueryFilter, decode_record
from engine_backends.builtin_models import tiny_llama_dir
from service.lifecycle.exit_codes import ExitCode
from service.lifecycle.server import Server
from service.runtime.state import ModelState
from service.settings.config import load_settings
from tests.conftest import _data_dir
from tests.server.lora_adapters import write_lora_adapter
from tests.server.stubs import detail_of, stubs
from trust.model_signing import SIGNATURE_FILENAME, sign_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import add_trusted_key
from xinserve.v1 import common_pb2, inference_pb2, model_pb2, sampling_pb2

pytestmark = [pytest.mark.engine]
ASYNC = pytest.mark.asyncio(loop_scope="session")
MODEL = "tiny"
TAMPER = "TAMPERED AFTER VERIFICATION " * 8
GREEDY = sampling_pb2.SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


async def _until(condition, what: str, limit_s: float = 300.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    key = Sm2PrivateKey.generate()
    store = root / "trust"
    add_trusted_key(store, key.public_key(), "release")
    source = tiny_llama_dir(_data_dir())
    model = root / "model"
    shutil.copytree(source, model, ignore=shutil.ignore_patterns(SIGNATURE_FILENAME))
    sign_model(model, key, MODEL)
    lora = root / "lora"
    good = write_lora_adapter(lora / "good", seed=1)
    sign_model(good, key, "good")
    unsigned = write_lora_adapter(lora / "unsigned", seed=2)
    tampered = write_lora_adapter(lora / "tampered", seed=3)
    sign_model(tampered, key, "tampered")
    write_lora_adapter(lora / "tampered", seed=4)  # same shapes and size, other weights
    toctou = write_lora_adapter(lora / "toctou", seed=5)
    sign_model(toctou, key, "toctou")
    adapters = {"good": good, "unsigned": unsigned, "tampered": tampered, "toctou": toctou}
    return {"root": root, "store": store, "model": model, "reference": source, "adapters": adapters}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(weights):
    root: Path = weights["root"]
    settings = load_settings(
        overrides={
            "data_dir": str(root / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "drain_grace_seconds": 1,
            "models": [
                {
                    "name": MODEL,
                    "path": str(weights["model"]),
                    "lora": {n: str(p) for n, p in weights["adapters"].items()},
                }
            ],
            "trust": {"trust_store_dir": str(weights["store"])},
            "engine": {"max_model_len": 512, "max_num_seqs": 8, "max_num_batched_tokens": 512},
        }
    )
    server = await Server.create(settings)
    entry = server.runtime.models[MODEL]
    loading = asyncio.create_task(server.load_models())
    # The model verified; its engine has not read it yet: change a file in place.
    await _until(lambda: entry.load_path is not None or loading.done(), "the model's verification")
    with (weights["model"] / "chat_template.jinja").open("a", encoding="utf-8") as f:
        f.write(TAMPER)
    assert await loading, repr(entry.state_reason)
    port = next(iter(server.frontend.ports.values()))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield server, stubs(channel), channel
    finally:
        await channel.close()
        await server.drain_and_stop()


async def _greedy(api, lora: str = "", request_id: str = "") -> list[int]:
    params = sampling_pb2.SamplingParams()
    params.CopyFrom(GREEDY)
    if lora:
        params.lora_name = lora
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(model=MODEL, prompt="hello world", sampling_params=params, request_id=request_id)
    )
    return list(reply.outputs[0].token_ids)


@ASYNC
async def test_adapters_are_listed_with_their_verification(served):
    _server, api, _channel = served
    model = (await api.models.GetModel(model_pb2.GetModelRequest(name=MODEL))).model
    assert model.state == model_pb2.MODEL_STATE_READY
    assert model.verification_status == model_pb2.VERIFICATION_STATUS_VERIFIED
    assert sorted(model.lora_adapters) == ["good", "toctou"]
    by_name = {a.name: a for a in model.lora_adapter_details}
    assert sorted(by_name) == ["good", "tampered", "toctou", "unsigned"]
    for name in ("good", "toctou"):
        assert by_name[name].verification_status == model_pb2.VERIFICATION_STATUS_VERIFIED
        assert by_name[name].servable
        assert by_name[name].manifest_digest.startswith("sm3:") and len(by_name[name].manifest_digest) == 68
    assert by_name["unsigned"].verification_status == model_pb2.VERIFICATION_STATUS_FAILED
    assert by_name["unsigned"].verification_reason_code == "unsigned"
    assert by_name["tampered"].verification_status == model_pb2.VERIFICATION_STATUS_FAILED
    assert by_name["tampered"].verification_reason_code == "file_modified"
    for name in ("unsigned", "tampered"):
        assert not by_name[name].servable and not by_name[name].manifest_digest
        # An ordinary caller sees the code and a fixed sentence, no file name or path.
        assert "/" not in by_name[name].verification_detail
        assert "safetensors" not in by_name[name].verification_detail


@ASYNC
async def test_refused_adapters_are_refused_and_never_change_the_output(served):
    _server, api, _channel = served
    base = await _greedy(api)
    with_good = await _greedy(api, "good")
    assert with_good != base, "the signed adapter must change greedy output (else this test proves nothing)"
    for name in ("unsigned", "tampered"):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _greedy(api, name)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, name
        info = detail_of(err.value, error_details_pb2.ErrorInfo)
        assert info.reason == "LORA_NOT_SERVABLE"
        assert detail_of(err.value, error_details_pb2.RetryInfo) is None
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _greedy(api, "nope")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert await _greedy(api) == base


@ASYNC
async def test_audit_record_names_the_adapter_and_its_digest(served):
    server, api, _channel = served
    model = (await api.models.GetModel(model_pb2.GetModelRequest(name=MODEL))).model
    digest = {a.name: a.manifest_digest for a in model.lora_adapter_details}["good"]
    await _greedy(api, "good", request_id="lora-audit-1")
    await _greedy(api, request_id="lora-audit-2")
    rows = await server.runtime.audit.log.query(QueryFilter(event="rpc"))
    records = {r.request_id: r for r in (decode_record(row.body)[2] for row in rows)}
    used = records["lora-audit-1"]
    assert used.outcome == "OK"
    assert used.manifest_digest == model.manifest_digest
    assert used.detail["lora_adapter"] == "good"
    assert used.detail["lora_manifest_digest"] == digest
    assert "lora_adapter" not in records["lora-audit-2"].detail
    verified = await server.runtime.audit.log.query(QueryFilter(event="model_verified"))
    events = [decode_record(r.body)[2] for r in verified]
    adapters = {e.detail.get("lora_adapter"): (e.outcome, e.manifest_digest) for e in events}
    assert adapters["good"] == ("OK", digest)
    assert adapters["unsigned"][0] == "FAILED_PRECONDITION"
    assert adapters["tampered"][0] == "FAILED_PRECONDITION"


@ASYNC
async def test_a_model_file_changed_after_verification_is_not_served(served, weights):
    from transformers import AutoTokenizer

    _server, api, _channel = served
    messages = [{"role": "user", "content": "hello"}]
    reply = await api.inference.Chat(
        inference_pb2.ChatRequest(
            model=MODEL,
            messages=[common_pb2.ChatMessage(role="user", content="hello")],
            sampling_params=sampling_pb2.SamplingParams(max_tokens=1),
        )
    )
    signed = AutoTokenizer.from_pretrained(str(weights["reference"]))
    changed = AutoTokenizer.from_pretrained(str(weights["model"]))

    def prompt_tokens(tokenizer) -> int:  # as the engine renders a chat: template, then tokens
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    expected = prompt_tokens(signed)
    tampered = prompt_tokens(changed)
    assert TAMPER in (weights["model"] / "chat_template.jinja").read_text(encoding="utf-8")
    assert tampered > expected  # the change would show in the prompt's length
    assert reply.usage.prompt_tokens == expected
    model = (await api.models.GetModel(model_pb2.GetModelRequest(name=MODEL))).model
    assert model.verification_status == model_pb2.VERIFICATION_STATUS_VERIFIED


@ASYNC
async def test_an_adapter_changed_after_verification_is_not_served(served, weights):
    _server, api, _channel = served
    good = await _greedy(api, "good")
    base = await _greedy(api)
    # vLLM reads an adapter when a request first names it: replace toctou's weights with
    # good's before that first request.
    source = weights["adapters"]["toctou"] / "adapter_model.safetensors"
    shutil.copyfile(weights["adapters"]["good"] / "adapter_model.safetensors", source)
    served_out = await _greedy(api, "toctou")
    assert served_out != good, "the replaced bytes were served"
    assert served_out != base


@ASYNC
async def test_killed_engine_core_turns_model_and_server_not_serving(served):
    server, api, channel = served
    entry = server.runtime.models[MODEL]
    health = health_pb2_grpc.HealthStub(channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=f"xinserve.v1.InferenceService/{MODEL}"))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    pids = entry.engine.process_ids()  # type: ignore[union-attr]
    assert pids, "no engine-core process found"
    os.kill(pids[0], signal.SIGKILL)

    assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
    await _until(lambda: entry.state is ModelState.FAILED, "the model to fail")
    model = (await api.models.GetModel(model_pb2.GetModelRequest(name=MODEL))).model
    assert model.state == model_pb2.MODEL_STATE_FAILED
    assert model.state_reason_code == "engine_died"
    overall = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert overall.status == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _greedy(api)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert detail_of(err.value, error_details_pb2.ErrorInfo).reason == "MODEL_NOT_SERVABLE"
    assert detail_of(err.value, error_details_pb2.RetryInfo) is None
    assert server.stop_requested.is_set() and server.exit_code == ExitCode.ENGINE_DIED
    rows = await server.runtime.audit.log.query(QueryFilter(event="model_unloaded"))
    (death,) = [decode_record(r.body)[2] for r in rows]
    assert (death.model, death.outcome, death.detail["reason"]) == (MODEL, "UNAVAILABLE", "engine_died")
