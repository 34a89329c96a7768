"""``xinserve.v1.InferenceService`` over gRPC: a thin binding of ``service.operations.inference``.

Each method hands its request and the call's record (``context.call``, set by the gRPC
adapter in ``service.frontends.grpc.interceptors``) to the transport-neutral operation.
"""

from __future__ import annotations

from service.operations.inference import Inference
from xinserve.v1 import inference_pb2_grpc


class InferenceServicer(inference_pb2_grpc.InferenceServiceServicer):
    def __init__(self, inference: Inference) -> None:
        self._ops = inference

    async def Generate(self, request, context):
        return await self._ops.generate(request, context.call)

    async def GenerateStream(self, request, context):
        async for msg in self._ops.generate_stream(request, context.call):
            yield msg

    async def Chat(self, request, context):
        return await self._ops.chat(request, context.call)

    async def ChatStream(self, request, context):
        async for msg in self._ops.chat_stream(request, context.call):
            yield msg

    async def Embed(self, request, context):
        return await self._ops.embed(request, context.call)

    async def Tokenize(self, request, context):
        return await self._ops.tokenize(request, context.call)

    async def Detokenize(self, request, context):
        return await self._ops.detokenize(request, context.call)

    async def Abort(self, request, context):
        return await self._ops.abort(request, context.call)
