"""The server's one typed configuration: YAML file, ``XINSERVE_*`` environment, CLI flags.

Precedence (highest first): CLI flags, environment (``XINSERVE_ENGINE__MAX_NUM_SEQS=8``:
nested fields joined by ``__``), the YAML file given by ``--config``, defaults.
Everything is validated at start; ``load_settings`` raises ``ConfigError`` whose message
names each bad option by its dotted path (``admission.max_in_flight: ...``).
Every option is listed in the README's configuration reference.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from audit.config import AuditSettings
from engine_backends.builtin_models import BUILTIN_NAMES, DEFAULT_BUILTINS
from engine_backends.platforms import DEVICE_CHOICES
from service.settings.auth import AuthSettings
from service.settings.base import SettingsModel
from service.settings.roles import PolicyError, RoleGrants
from trust.tee.config import TeeSettings
from xinserve_client.addresses import is_loopback_host, split_host_port


class ConfigError(Exception):
    """Invalid configuration. The message names every bad option; safe to print."""


def _check_address(address: str) -> str:
    split_host_port(address)
    return address


class ListenSettings(SettingsModel):
    """Where the server listens: gRPC, and the OpenAI-compatible HTTP API."""

    plaintext: list[str] = Field(default_factory=lambda: ["127.0.0.1:50051"])
    """Plaintext gRPC listeners (HOST:PORT); loopback only unless allow_insecure_remote."""
    tls: list[str] = Field(default_factory=list)
    """TLS gRPC listeners (HOST:PORT); need tls.cert_file and tls.key_file."""
    http: list[str] = Field(default_factory=list)
    """Plaintext OpenAI-compatible HTTP listeners (HOST:PORT); loopback only unless
    allow_insecure_remote."""
    https: list[str] = Field(default_factory=list)
    """OpenAI-compatible HTTPS listeners (HOST:PORT); the same tls.* files as gRPC (with
    tls.client_ca_file they require a client certificate)."""
    allow_insecure_remote: bool = False
    """Allow a plaintext listener on a non-loopback address (not for production)."""

    @field_validator("plaintext", "tls", "http", "https")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        return [_check_address(a) for a in value]


class TlsSettings(SettingsModel):
    """Server certificate and, for mTLS, the CA that signs client certificates (PEM files)."""

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    """When set, TLS listeners require a client certificate signed by this CA (mTLS)."""


class EngineArgsSettings(SettingsModel):
    """vLLM engine arguments (names as vLLM's EngineArgs). None = vLLM's or the device's default."""

    dtype: str | None = None
    max_model_len: int | None = Field(default=None, ge=16)
    kv_cache_memory_bytes: int | None = Field(default=None, ge=16 * 1024 * 1024)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    distributed_executor_backend: Literal["mp", "ray", "uni", "external_launcher"] | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=16)
    max_loras: int | None = Field(default=None, ge=1)
    max_lora_rank: int | None = Field(default=None, ge=1)
    max_logprobs: int | None = Field(default=None, ge=0)
    seed: int | None = None

    def engine_args(self) -> dict[str, Any]:
        """The vLLM EngineArgs overrides that are set."""
        skip = ("device", "visible_devices", "xgrammar_cache_mb")
        return {k: v for k, v in self.model_dump().items() if v is not None and k not in skip}


class ModelSettings(SettingsModel):
    """A model served from a local directory."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    path: Path
    kind: Literal["generate", "embed"] = "generate"
    lora: dict[str, Path] = Field(default_factory=dict)
    """LoRA adapter name -> local directory."""
    tool_call_parser: str | None = None
    """vLLM tool parser reading this model's ``tool_choice: "auto"`` replies (as vLLM's
    ``--tool-call-parser``: ``hermes``, ``llama3_json``, ``mistral``, ...); unset: ``auto`` is
    refused (INVALID_ARGUMENT naming ``tool_choice``)."""
    engine: EngineArgsSettings = Field(default_factory=EngineArgsSettings)
    """vLLM engine arguments for this model only; those set override ``engine.*``."""

    @field_validator("tool_call_parser")
    @classmethod
    def _tool_call_parser(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from engine_backends.tool_calls import tool_parser_names

        names = tool_parser_names()
        if value not in names:
            raise ValueError(f"must be one of vLLM's tool parsers: {', '.join(names)}")
        return value


class TrustSettings(SettingsModel):
    """Signature verification of models (and of the running image) before anything is served."""

    trust_store_dir: Path | None = None
    """Trusted SM2 public keys and revocations (docs/signing.md). The embedded default models
    use the local demo trust store under data_dir instead."""
    allow_unsigned_models: bool = False
    """Serve models whose verification fails (development only: warned and recorded)."""
    image_signature_file: Path | None = None
    """DSSE envelope signing the running container image (``xinserve sign image``)."""
    image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    """Digest of the running image (e.g. from the orchestrator); checked against the signature."""


class EngineSettings(EngineArgsSettings):
    """The engine: its device, and vLLM engine arguments for every model (a model's own
    ``engine`` section overrides them for that model)."""

    device: str = "auto"
    visible_devices: str | None = None
    xgrammar_cache_mb: int = Field(default=64, ge=1, le=1024 * 1024)
    """MiB of compiled JSON-Schema/grammar structured-output grammars each engine process keeps
    (vLLM's ``VLLM_XGRAMMAR_CACHE_MB``, vLLM's default 512). Beyond it xgrammar evicts
    grammars; an evicted one is compiled again when a request uses its schema once more."""

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in DEVICE_CHOICES:
            raise ValueError(f"must be one of {', '.join(DEVICE_CHOICES)}")
        return value


class DevicesSettings(SettingsModel):
    """The device inventory read in the background (``GetServerInfo.devices``, the
    ``xinserve_device_*`` gauges): how often, and how long one vendor tool may take."""

    refresh_seconds: float = Field(default=15.0, ge=1.0, le=3600.0)
    """Seconds between two readings of the device tools (nvidia-smi, npu-smi ...)."""
    tool_timeout_seconds: float | None = Field(default=None, gt=0, le=600.0)
    """Seconds one tool may run before the reading reports the device DEGRADED; unset: 10 s,
    or the refresh interval when that is shorter."""

    @property
    def tool_timeout(self) -> float:
        """The tool timeout in effect (seconds)."""
        if self.tool_timeout_seconds is not None:
            return self.tool_timeout_seconds
        return min(10.0, self.refresh_seconds)

    @model_validator(mode="after")
    def _timeout_within_refresh(self) -> DevicesSettings:
        if self.tool_timeout_seconds is not None and self.tool_timeout_seconds > self.refresh_seconds:
            raise ValueError(
                f"tool_timeout_seconds ({self.tool_timeout_seconds:g}) must not exceed refresh_seconds "
                f"({self.refresh_seconds:g}): a reading has to end before the next one is due"
            )
        return self


class AdmissionSettings(SettingsModel):
    """Admission control for inference calls."""

    max_in_flight: int = Field(default=64, ge=1)
    """Calls running at once; more wait in the queue."""
    max_queue: int = Field(default=256, ge=0)
    """Calls waiting for admission; past it RESOURCE_EXHAUSTED with RetryInfo."""
    retry_after_ms: int = Field(default=1000, ge=1)
    """The retry delay suggested in RetryInfo."""


class LimitsSettings(SettingsModel):
    """Bounds on request size (all checked before the engine sees the request)."""

    max_message_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=2**31 - 1)
    max_n: int = Field(default=16, ge=1)
    max_stop_sequences: int = Field(default=64, ge=0)
    max_stop_sequence_bytes: int = Field(default=256, ge=1)
    max_embed_inputs: int = Field(default=1024, ge=1)
    max_completion_prompts: int = Field(default=64, ge=1)
    """Prompts in one OpenAI ``/v1/completions`` request (``prompt`` as a list; 400 naming
    ``prompt`` past it). Each prompt is admitted and audited as one Generate call."""
    max_chat_messages: int = Field(default=1024, ge=1)
    max_prompt_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    """Largest prompt text (or chat messages, or embedding inputs together, or text to
    tokenize), checked before tokenizing: a far larger text cannot fit any context anyway."""
    max_http_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """Largest HTTP request body of the OpenAI-compatible API (413 past it)."""
    http_body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """Seconds an OpenAI-compatible API request body may take to arrive in full (408 past it,
    connection closed); read before admission, so a slow body never holds an admission slot."""
    max_http_bodies_per_peer: int = Field(default=32, ge=1)
    """Request bodies being received at once from one client address, of the
    ``admission.max_in_flight + admission.max_queue`` received at once in all (429 reason
    ``body_reception_peer_share`` past it). Behind a gateway every body comes from the
    gateway's address: raise it there."""
    max_http_bodies_per_principal: int = Field(default=64, ge=1)
    """Request bodies being received at once for one principal identified before its body (a
    bearer token or client certificate; 429 ``body_reception_principal_share`` past it)."""
    http_body_min_rate_bytes_per_s: int = Field(default=500, ge=0)
    """Slowest upload accepted: a body must arrive within ``http_body_rate_grace_s`` plus one
    second per this many bytes received (408 ``request_body_too_slow`` past it); 0 turns it off.
    Apache httpd's ``mod_reqtimeout`` default is the same (``body=20,MinRate=500``)."""
    http_body_rate_grace_s: float = Field(default=10.0, gt=0, le=3600)
    """Seconds a body may take before the minimum upload rate applies."""
    http_refusal_audit_interval_s: float = Field(default=60.0, gt=0, le=86400)
    """Refused request bodies (429, 408, 413, client gone while sending) are audited once per
    this many seconds per client address and reason; the record counts those not audited."""
    max_http_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Largest OpenAI-compatible API request head (request line and headers together), checked
    before authentication: 431 past it, connection closed."""
    http_header_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    """Seconds a request head may take to arrive after the connection opened or the request
    began (408 past it, connection closed): an idle or dripping connection is not kept."""
    max_http_connections: int = Field(default=4096, ge=1)
    """OpenAI-compatible API connections at once over all HTTP listeners (503 with Retry-After
    past it); lowered at start to leave 512 descriptors of RLIMIT_NOFILE to gRPC, health
    probes, the audit store and the engines."""
    max_http_connections_per_peer: int = Field(default=256, ge=1)
    """Connections at once from one client address (503 past it). Behind a gateway every
    connection comes from the gateway's address: raise it there."""
    max_logprob_entries: int = Field(default=131072, ge=1)
    """Most log-probability entries one generation request may ask for (INVALID_ARGUMENT past
    it, naming ``sampling_params.logprobs`` or ``prompt_logprobs``): n x (logprobs + 1) x
    max_tokens, plus (prompt_logprobs + 1) x the longest prompt that leaves room for
    max_tokens; an unset max_tokens counts as the model's context length. Bounds the memory
    and the conversion work of one reply (each entry is about 17 bytes on the wire: the default
    keeps a reply within the 4 MiB gRPC clients accept by default)."""
    max_structured_choices: int = Field(default=1000, ge=1)
    """Most entries of a structured-output ``choice`` list (INVALID_ARGUMENT naming
    ``sampling_params.choice.choices``; OpenAI front end: ``choice``). vLLM compiles the list
    into one grammar in the EngineCore, and that compile is not stopped by cancelling the call
    (20,000 entries measured 13.8 s of EngineCore CPU). The default is OpenAI's documented
    Structured Outputs bound of 1,000 enum values per schema; xgrammar compiled 1,000 short
    entries in 0.04 CPU-seconds here (vLLM 0.32, 2,048-token vocabulary), 5,000 in 0.73."""
    max_structured_output_bytes: int = Field(default=256 * 1024, ge=1024)
    """Largest structured-output constraint in UTF-8 bytes: the JSON Schema text, regex or
    grammar, or the ``choice`` entries together (INVALID_ARGUMENT naming the field). OpenAI's
    Structured Outputs bound the names, enum and const values of one schema to 120,000
    characters; the default leaves room for the schema around them. At the default, xgrammar
    compiled the costliest constraints tried (a 270 KB JSON Schema of 3,000 properties, 1,000
    choices of 250 bytes, an 8,000-literal grammar) in 1.7-1.9 CPU-seconds here (vLLM 0.32,
    2,048-token vocabulary); lower it where that is too much per request."""
    max_structured_output_depth: int = Field(default=64, ge=1)
    """Deepest nesting of a structured-output constraint: JSON arrays/objects of a JSON Schema,
    groups of a regex, parenthesised/bracketed groups of a grammar (INVALID_ARGUMENT naming
    the field). OpenAI's Structured Outputs allow 10 levels of schema nesting, each level being
    two or three JSON levels (``properties``/``items``); deeper nesting only costs the
    compiler's recursion."""
    max_token_ids: int = Field(default=131072, ge=1)
    """Most token ids of a request: ``prompt_token_ids`` of Generate (OpenAI: a token-id
    ``prompt``), ``token_ids`` of Detokenize (OpenAI ``/detokenize``: ``tokens``). The default
    is a 128 Ki-token context, the largest of common open models (Llama 3.1, Qwen2.5); no
    prompt or output of those is longer."""
    max_logit_bias: int = Field(default=1024, ge=1)
    """Most ``logit_bias`` entries of a request (also bounded by the vocabulary size): vLLM
    applies each entry at every decoding step of the request."""
    refuse_special_tokens_in_prompt: bool = False
    """Refuse a text prompt of Generate/GenerateStream and ``/v1/completions`` that holds one of
    the model's special-token strings (``<|im_start|>``, ``</s>`` ...; INVALID_ARGUMENT / 400
    naming ``prompt``), as Chat refuses them in messages. Off by default: as in vLLM, such a
    text then becomes that control token, so end-user text passed as a prompt can forge turns
    or end the sequence. Token-id prompts are never checked."""
    max_tokenize_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest text of Tokenize (OpenAI ``/tokenize``: ``prompt``) in UTF-8 bytes, and never
    more than ``max_prompt_bytes``: twice a 128 Ki-token context at ~4 bytes per token, while
    2 MiB measured 3–18 s of tokenizer time on one core."""


class Settings(BaseSettings):
    """The whole server configuration."""

    model_config = SettingsConfigDict(env_prefix="XINSERVE_", env_nested_delimiter="__", extra="forbid")

    data_dir: Path = Field(default_factory=lambda: _default_data_dir())
    """Built-in models, demo keys and the embedded audit log live here."""
    listen: ListenSettings = Field(default_factory=ListenSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    models: list[ModelSettings] = Field(default_factory=list)
    """Models to serve; empty serves the embedded default models."""
    builtin_models: list[str] = Field(default_factory=lambda: list(DEFAULT_BUILTINS))
    """The embedded models served when ``models`` is empty (engine_backends.builtin_models)."""
    trust: TrustSettings = Field(default_factory=TrustSettings)
    tee: TeeSettings = Field(default_factory=TeeSettings)
    """TEE evidence provider, key broker, decrypted-model directory (docs/tee.md)."""
    audit: AuditSettings = Field(default_factory=AuditSettings)
    """The audit log (docs/audit.md). ``audit.path`` defaults to ``<data_dir>/audit/audit.db`` and
    ``audit.signing_key_path`` to ``<data_dir>/keys/server-sm2.pem`` (created on first start)."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    devices: DevicesSettings = Field(default_factory=DevicesSettings)
    drain_grace_seconds: float = Field(default=30.0, ge=0)
    """On SIGTERM, how long in-flight calls may run before they are aborted."""
    reflection: bool = True
    """Serve gRPC server reflection (for grpcurl)."""
    metrics_listen: str | None = "127.0.0.1:9464"
    """Prometheus /metrics HTTP listener (HOST:PORT); null turns it off."""
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @model_validator(mode="after")
    def _cross_checks(self) -> Settings:
        if not self.listen.plaintext and not self.listen.tls:
            raise ValueError("listen: at least one plaintext or tls listener is needed")
        if not self.listen.allow_insecure_remote:
            for kind, addresses in (("plaintext", self.listen.plaintext), ("http", self.listen.http)):
                for address in addresses:
                    if not is_loopback_host(split_host_port(address)[0]):
                        raise ValueError(
                            f"listen.{kind}: {address} is not a loopback address; use a TLS listener "
                            "or set listen.allow_insecure_remote"
                        )
        if (self.listen.tls or self.listen.https) and (self.tls.cert_file is None or self.tls.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file are required for a TLS listener")
        for name in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self.tls, name)
            if path is not None and not path.is_file():
                raise ValueError(f"tls.{name}: no such file: {path}")
        if self.auth.token_file is not None and not self.auth.token_file.is_file():
            raise ValueError(f"auth.token_file: no such file: {self.auth.token_file}")
        t = self.trust
        if (t.image_signature_file is None) != (t.image_digest is None):
            raise ValueError("trust.image_signature_file and trust.image_digest must be set together")
        if t.image_signature_file is not None and not t.image_signature_file.is_file():
            raise ValueError(f"trust.image_signature_file: no such file: {t.image_signature_file}")
        if t.trust_store_dir is not None and not t.trust_store_dir.is_dir():
            raise ValueError(f"trust.trust_store_dir: no such directory: {t.trust_store_dir}")
        unknown = [n for n in self.builtin_models if n not in BUILTIN_NAMES]
        if unknown:
            raise ValueError(f"builtin_models: {', '.join(unknown)}: choose from {', '.join(BUILTIN_NAMES)}")
        if not self.builtin_models or len(set(self.builtin_models)) != len(self.builtin_models):
            raise ValueError("builtin_models: name at least one model, each once")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError("models: served names must be unique")
        for m in self.models:
            if not m.path.is_dir():
                raise ValueError(f"models: {m.name}: no such model directory: {m.path}")
        if self.metrics_listen is not None:
            _check_address(self.metrics_listen)
        try:
            RoleGrants(self.auth)
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' sources, highest precedence first: the keyword arguments (the CLI
        flags, from ``load_settings``), the ``XINSERVE_*`` environment, the ``--config`` YAML
        file; nested sections are merged key by key across them, lists replaced whole."""
        return (init_settings, env_settings, _ConfigFileSource(settings_cls, _CONFIG_FILE.get()))


_CONFIG_FILE: ContextVar[Path | None] = ContextVar("xinserve_config_file", default=None)
"""The ``--config`` file of the ``load_settings`` call being built (None: no file)."""


class _ConfigFileSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML file source, strict: a missing or unreadable file, invalid
    YAML or a top level that is not a mapping is a ``ConfigError`` (the base class skips a
    missing file and lets the others fail later with a less precise message)."""

    def __init__(self, settings_cls: type[BaseSettings], config_file: Path | None) -> None:
        if config_file is not None and not config_file.is_file():
            self._read_file(config_file)  # raises ConfigError naming why it cannot be read
        super().__init__(settings_cls, yaml_file=config_file, yaml_file_encoding="utf-8")

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            text = file_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--config: cannot read {file_path}: {exc.strerror}") from exc
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--config: {file_path} is not valid YAML") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"--config: {file_path} must hold a mapping at the top level")
        return loaded or {}


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "xinserve"


def _format(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _with_audit_defaults(settings: Settings) -> Settings:
    """Place the audit database and the server key under data_dir unless configured (by any
    source, null included)."""
    given = settings.audit.model_fields_set
    updates: dict[str, Any] = {}
    if "path" not in given:
        updates["path"] = settings.data_dir / "audit" / "audit.db"
    if "signing_key_path" not in given:
        updates["signing_key_path"] = settings.data_dir / "keys" / "server-sm2.pem"
    if not updates:
        return settings
    audit = AuditSettings.model_validate({**settings.audit.model_dump(), **updates})
    return settings.model_copy(update={"audit": audit})


def load_settings(config_file: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Build the settings: defaults < YAML file < ``XINSERVE_*`` environment < ``overrides`` (CLI),
    through pydantic-settings' sources (``Settings.settings_customise_sources``).

    Raises:
        ConfigError: unreadable file or any invalid option (all named in the message).
    """
    token = _CONFIG_FILE.set(config_file)
    try:
        return _with_audit_defaults(Settings(**(overrides or {})))
    except ValidationError as exc:
        raise ConfigError(_format(exc)) from exc
    except ValueError as exc:  # malformed environment value (e.g. bad JSON in a list variable)
        raise ConfigError(f"invalid configuration: {exc}") from exc
    finally:
        _CONFIG_FILE.reset(token)
