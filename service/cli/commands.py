"""``xinserve serve`` (with ``--print-engine-args``) and ``xinserve token``: the server-side
subcommands."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from engine_backends.errors import PlatformError
from engine_backends.gguf_convert import ModelSourceError
from engine_backends.platforms import DEVICE_CHOICES
from service.access.auth import TokenFileError, hash_token, new_token
from service.core import logs
from service.core.listen_probe import ListenError, probe_listeners
from service.core.tls_material import TlsMaterialError, load_tls_material
from service.lifecycle.exit_codes import ExitCode
from service.settings.auth import default_roles
from service.settings.config import ConfigError, load_settings
from trust.errors import TrustStoreError


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the gRPC server",
        description=(
            "Run the xinserve gRPC server. With no --model it serves the embedded default models "
            "(smollm2-135m-instruct for generation and chat, converted on first start, and all-MiniLM-L6-v2 "
            "for embeddings; --builtin-model picks others). Options also come "
            "from --config (YAML) and XINSERVE_* variables; flags win. Exit codes: 0 stopped cleanly, "
            "2 invalid configuration, 3 environment error (device plugin missing, port in use, bad trust "
            "store, unusable TLS certificate or key), 4 no model could be served, 5 the running image's "
            "signature did not verify, 6 the audit "
            "log cannot be opened or does not verify, 7 a model's engine died while serving (restart the "
            "server: every model is verified again)."
        ),
    )
    p.add_argument("--config", type=Path, help="YAML configuration file")
    p.add_argument("--listen", action="append", metavar="HOST:PORT", help="plaintext listener (repeatable)")
    p.add_argument("--tls-listen", action="append", metavar="HOST:PORT", help="TLS listener (repeatable)")
    p.add_argument(
        "--http-listen", action="append", metavar="HOST:PORT", help="OpenAI-compatible HTTP listener (repeatable)"
    )
    p.add_argument(
        "--https-listen",
        action="append",
        metavar="HOST:PORT",
        help="OpenAI-compatible HTTPS listener (repeatable; --tls-cert/--tls-key, mTLS with --tls-client-ca)",
    )
    p.add_argument("--tls-cert", type=Path, help="server certificate chain (PEM)")
    p.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    p.add_argument("--tls-client-ca", type=Path, help="CA for client certificates: TLS listeners require mTLS")
    p.add_argument(
        "--allow-insecure-remote",
        action="store_true",
        default=None,
        help="allow a plaintext listener on a non-loopback address",
    )
    p.add_argument("--token-file", type=Path, help="bearer tokens: lines '<principal> <sha256-hex> [roles]'")
    p.add_argument(
        "--auth-required",
        action="store_true",
        default=None,
        help="refuse calls without a valid token or client certificate",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME=PATH[:embed]",
        help="serve a local model directory under NAME (repeatable); ':embed' for embedding models",
    )
    p.add_argument(
        "--builtin-model",
        action="append",
        metavar="NAME",
        help="with no --model: serve this built-in model (repeatable; smollm2-135m-instruct, "
        "xinserve-tiny-llama, all-MiniLM-L6-v2)",
    )
    p.add_argument("--trust-store", type=Path, help="directory of trusted SM2 keys for --model directories")
    p.add_argument(
        "--allow-unsigned-models",
        action="store_true",
        default=None,
        help="DEVELOPMENT ONLY: serve models that fail signature verification (warned and recorded)",
    )
    p.add_argument("--image-signature", type=Path, help="DSSE envelope signing the running image")
    p.add_argument(
        "--image-digest",
        help="the digest the running image was pulled by (sha256:...); the signature must cover it. This "
        "proves that this digest is signed, not that the process runs from it (docs/signing.md)",
    )
    p.add_argument("--device", choices=DEVICE_CHOICES, help="accelerator kind (default auto)")
    p.add_argument("--data-dir", type=Path, help="where built-in models, keys and the audit log live")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--dtype")
    p.add_argument("--kv-cache-memory-bytes", type=int)
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-in-flight", type=int, help="inference calls running at once")
    p.add_argument("--max-queue", type=int, help="inference calls waiting for admission")
    p.add_argument("--drain-grace-seconds", type=float)
    p.add_argument("--no-reflection", action="store_true", help="turn gRPC server reflection off")
    p.add_argument("--metrics-listen", metavar="HOST:PORT", help="Prometheus /metrics listener")
    p.add_argument("--no-metrics", action="store_true", help="no Prometheus listener")
    p.add_argument("--log-format", choices=("auto", "json", "console"))
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--print-engine-args",
        action="store_true",
        help="print the vLLM engine arguments each model would start with, with their source and reason, "
        "then exit (nothing is started)",
    )
    p.set_defaults(func=_serve)

    t = sub.add_parser("token", help="bearer token helpers")
    tsub = t.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    h = tsub.add_parser(
        "new",
        help="make a new token and its token-file line",
        description="Print a fresh bearer token (give it to the client) and the line to add to the token file.",
    )
    h.add_argument("--principal", required=True, help="the caller's name (no spaces, '#' or control characters)")
    h.add_argument(
        "--roles",
        default="user",
        help="comma-separated roles of the default policy: user, admin, security_admin, auditor",
    )
    h.add_argument(
        "--allow-custom-roles", action="store_true", help="accept role names defined only in your own auth.roles policy"
    )
    h.set_defaults(func=_token_new)


def _parse_model(spec: str) -> dict[str, Any]:
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ConfigError(f"--model {spec!r}: expected NAME=PATH[:embed]")
    kind = "generate"
    if rest.endswith(":embed"):
        rest, kind = rest[: -len(":embed")], "embed"
    return {"name": name, "path": rest, "kind": kind}


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Turn the flags that were given into a nested settings dict."""
    o: dict[str, Any] = {}

    def put(path: str, value: Any) -> None:
        if value is None:
            return
        node = o
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    put("listen.plaintext", args.listen)
    put("listen.tls", args.tls_listen)
    if args.tls_listen and not args.listen:
        put("listen.plaintext", [])
    put("listen.http", args.http_listen)
    put("listen.https", args.https_listen)
    put("listen.allow_insecure_remote", args.allow_insecure_remote)
    put("tls.cert_file", args.tls_cert)
    put("tls.key_file", args.tls_key)
    put("tls.client_ca_file", args.tls_client_ca)
    put("auth.token_file", args.token_file)
    put("auth.required", args.auth_required)
    if args.model:
        put("models", [_parse_model(s) for s in args.model])
    put("builtin_models", args.builtin_model)
    put("trust.trust_store_dir", args.trust_store)
    put("trust.allow_unsigned_models", args.allow_unsigned_models)
    put("trust.image_signature_file", args.image_signature)
    put("trust.image_digest", args.image_digest)
    put("engine.device", args.device)
    put("data_dir", args.data_dir)
    put("engine.max_model_len", args.max_model_len)
    put("engine.dtype", args.dtype)
    put("engine.kv_cache_memory_bytes", args.kv_cache_memory_bytes)
    put("engine.tensor_parallel_size", args.tensor_parallel_size)
    put("engine.max_num_seqs", args.max_num_seqs)
    put("admission.max_in_flight", args.max_in_flight)
    put("admission.max_queue", args.max_queue)
    put("drain_grace_seconds", args.drain_grace_seconds)
    if args.no_reflection:
        put("reflection", False)
    put("metrics_listen", args.metrics_listen)
    if args.no_metrics:
        o["metrics_listen"] = None
    put("log_format", args.log_format)
    put("log_level", args.log_level)
    return o


_ENGINE_PACKAGES = frozenset({"vllm", "torch"})
_MISSING_ENGINE = (
    "the inference engine is not installed in this environment (no module {name!r}). Install the "
    "locked environment with vLLM's CPU build: `uv sync --locked --extra cpu` (or run scripts/bootstrap); "
    "for an accelerator, install its vLLM build (see the README's Devices)."
)


def _serve(args: argparse.Namespace) -> int:
    if args.print_engine_args:
        return _print_engine_args(args)
    try:
        settings = load_settings(args.config, overrides_from_args(args))
    except ConfigError as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    try:
        if settings.listen.tls or settings.listen.https:
            load_tls_material(settings.tls)
    except TlsMaterialError as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    # A busy port refuses the start before the engine import, not minutes later. The listeners
    # check again when they bind (the probe is racy by nature: service.core.listen_probe).
    try:
        probe_listeners(settings)
    except ListenError as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    logs.quiet_engine_logs()
    # Imports the engine (seconds, more on a busy host): only once the configuration is valid.
    try:
        from service.lifecycle.server import serve
        from service.lifecycle.startup_checks import StartupRefused, data_dir_ok
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _ENGINE_PACKAGES:
            raise
        print(f"xinserve serve: {_MISSING_ENGINE.format(name=exc.name)}", file=sys.stderr)
        return ExitCode.ENVIRONMENT

    logs.configure(settings.log_format, settings.log_level)
    if not data_dir_ok(settings.data_dir):
        print(f"xinserve serve: data_dir: cannot create or write to {settings.data_dir}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    try:
        return asyncio.run(serve(settings))
    except (PlatformError, TokenFileError, TrustStoreError, ModelSourceError, TlsMaterialError) as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    except StartupRefused as exc:
        print(f"xinserve serve: refusing to start: {exc}", file=sys.stderr)
        return exc.exit_code
    except ListenError as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    except RuntimeError as exc:
        if "Failed to bind" in str(exc) or "bind" in str(exc).lower():
            print(f"xinserve serve: cannot listen: {exc}", file=sys.stderr)
            return ExitCode.ENVIRONMENT
        raise


def _token_new(args: argparse.Namespace) -> int:
    """Exit 0 with the token and its line; 2 when the principal or a role cannot be stored as
    one token-file line, or a role is not in the default policy (without --allow-custom-roles)."""
    principal = args.principal
    if not principal or any(c.isspace() or c == "#" or not c.isprintable() for c in principal):
        print(
            "xinserve token new: --principal must be non-empty, without spaces, '#' or control characters",
            file=sys.stderr,
        )
        return ExitCode.CONFIG
    roles = args.roles.split(",")
    known = set(default_roles())
    bad = [r for r in roles if not r or any(c.isspace() or c in "#," or not c.isprintable() for c in r)]
    unknown = [r for r in roles if r not in known]
    if bad or (unknown and not args.allow_custom_roles):
        named = ", ".join(repr(r) for r in (bad or unknown))
        print(
            f"xinserve token new: unknown role(s) {named}; the default policy has {', '.join(sorted(known))}"
            " (--allow-custom-roles for roles of your own auth.roles)",
            file=sys.stderr,
        )
        return ExitCode.CONFIG
    token = new_token()
    print(f"token (give to the client, shown once): {token}")
    print(f"token-file line: {args.principal} {hash_token(token)} {','.join(roles)}")
    return ExitCode.OK


def _print_engine_args(args: argparse.Namespace) -> int:
    """``serve --print-engine-args``: each model's planned vLLM engine arguments with their
    source and reason; nothing is started. Exit 0, 2 invalid configuration, 3 the device's
    vLLM plugin is missing."""
    from engine_backends.builtin_models import builtin_serving_options
    from engine_backends.engine_args_plan import PlannedArg, plan_engine_args
    from engine_backends.errors import PlatformError
    from engine_backends.platforms import PROFILES, resolve_device
    from service.settings.config import ConfigError, load_settings

    try:
        settings = load_settings(args.config, overrides_from_args(args))
    except ConfigError as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    device = settings.engine.device
    try:
        profile = resolve_device(device) if device == "auto" else PROFILES[device]
        configured = settings.engine.engine_args()
        plans: list[tuple[str, list[PlannedArg]]] = []
        # The same layers service.lifecycle.server.model_entries starts each model with.
        for m in settings.models:
            plan = plan_engine_args(profile, configured, None, m.path, m.engine.engine_args())
            plans.append((f"model {m.name}", plan))
        if not settings.models:
            for name in settings.builtin_models:
                _, options = builtin_serving_options(name)
                # Built-in models are small (under 1 B parameters): the large-model rule never applies.
                plans.append((f"built-in model {name}", plan_engine_args(profile, configured, options)))
        print(f"device: {profile.name}")
        for title, plan in plans:
            print(f"{title}:")
            for arg in plan:
                print(f"  {arg.name} = {arg.value!r}    [{arg.source}] {arg.why}")
    except PlatformError as exc:
        print(f"xinserve serve: {exc}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    return ExitCode.OK
