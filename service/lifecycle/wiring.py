"""What the two front ends share, built once per server: the call core (identity, policy,
login throttle, admission, audit) and the inference operations over one ``Runtime``.

``service.lifecycle.server.Server.create`` builds it and hands it to the gRPC front end
(``service.frontends.grpc.server.Frontend``) and the OpenAI HTTP front end
(``service.frontends.openai.listener.HttpFrontend``); neither builds a core of its own.
"""

from __future__ import annotations

from typing import NamedTuple

from service.access.policy import AccessPolicy
from service.lifecycle.reload import authenticator_for
from service.operations.inference import Inference
from service.pipeline.call_core import CallCore
from service.runtime.state import Runtime
from service.settings.config import Settings


class SharedCore(NamedTuple):
    """The call core and the inference operations, in the order both front ends take them
    (``Frontend(*shared, settings, device)``, ``HttpFrontend(*shared, settings)``)."""

    core: CallCore
    inference: Inference


def shared_core(runtime: Runtime, settings: Settings) -> SharedCore:
    """One call core over ``runtime`` with the token file, mTLS rules and role policy of
    ``settings.auth``, and the inference operations under the same policy.

    Raises:
        TokenFileError: as ``service.lifecycle.reload.authenticator_for`` (the token file is
            unreadable, malformed, too widely readable, or grants conflicting duties).
    """
    core = CallCore(runtime, authenticator_for(settings), AccessPolicy(settings.auth))
    return SharedCore(core, Inference(runtime, core.policy))
