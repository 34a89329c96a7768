"""Exercise vllm_compat's shims on whatever vLLM the running interpreter has (run as a script
under another vLLM's venv; prints one JSON object). Used by test_vllm_api_surface."""

import asyncio
import contextlib
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with contextlib.redirect_stdout(sys.stderr):  # some vLLM releases log to stdout on import
    from engine_backends import vllm_compat as vc
    from engine_backends.protocol import SamplingOptions, StructuredOutput


class _NoRenderer:
    """An engine client without vLLM's Renderer pipeline (AsyncLLM before 0.18)."""


def main() -> None:
    opts = SamplingOptions(n=1, max_tokens=8, temperature=0.0, logprobs=2, stop=("x",), stop_token_ids=(3,), seed=1)
    params = vc.make_sampling_params(opts, {}, stream=True)
    constrained = vc.make_sampling_params(
        dataclasses.replace(opts, structured_output=StructuredOutput(kind="regex", value="[a-z]+")), {}, stream=False
    )
    try:
        vc.make_sampling_params(dataclasses.replace(opts, temperature=-1.0), {}, stream=False)
        refused = None
    except (ValueError, vc.VLLMClientError) as exc:
        refused = str(exc)
    pooling = vc.make_pooling_params(True)
    out = {
        "version": vc.engine_version(),
        "max_tokens": params.max_tokens,
        "stop": list(params.stop),
        "output_kind": params.output_kind.name,
        "regex": constrained.structured_outputs.regex,
        "refused": refused,
        "pooling_normalize": getattr(pooling, "use_activation", getattr(pooling, "normalize", None)),
        "prompt": asyncio.run(vc.render_token_prompt(_NoRenderer(), [1, 2, 3])),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
