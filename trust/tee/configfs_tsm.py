"""Evidence from the Linux configfs-tsm report interface (TDX, SEV-SNP, Arm CCA guests).

Follows the kernel ABI ``Documentation/ABI/testing/configfs-tsm-report``: a report is a directory
created under ``/sys/kernel/config/tsm/report``; the caller writes up to 64 bytes to ``inblob``
and reads ``outblob`` (the quote / report / token), ``auxblob`` (SNP certificate table),
``manifestblob`` (where the provider has one), ``provider`` (``tdx_guest``, ``sev_guest``,
``arm_cca_guest``) and ``generation``. ``generation`` counts writes to the report's attributes: if
it moved by more than our own write, another process wrote ``inblob`` concurrently and the
``outblob`` may not be ours, so the read is retried and, if that keeps happening, refused. The
directory is removed afterwards, whatever happened.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from trust.tee.errors import EvidenceError, TeeReason
from trust.tee.evidence import TEE_CCA, TEE_SNP, TEE_TDX, Evidence, padded_report_data

DEFAULT_ROOT = Path("/sys/kernel/config/tsm/report")
PROVIDERS: dict[str, str] = {"tdx_guest": TEE_TDX, "sev_guest": TEE_SNP, "arm_cca_guest": TEE_CCA}
MAX_BLOB = 1 << 20  # no provider's outblob/auxblob comes near this; a larger one is refused
MAX_ATTEMPTS = 3


class ConfigfsOps:
    """The file operations used on a report directory (the real file system by default).

    configfs creates a report's attribute files itself on ``mkdir``; a test replaces this class to
    lay out a temporary directory the way the kernel does.
    """

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def write(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.EIO, "short write")
        finally:
            os.close(fd)

    def read(self, path: Path, limit: int = MAX_BLOB) -> bytes:
        with open(path, "rb", buffering=0) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, "attribute larger than expected")
        return data


def _generation(text: bytes) -> int:
    try:
        value = int(text.strip().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise EvidenceError(TeeReason.PROVIDER_ERROR, "configfs-tsm generation is not a decimal integer") from None
    if value < 0:
        raise EvidenceError(TeeReason.PROVIDER_ERROR, "configfs-tsm generation is negative")
    return value


class ConfigfsTsmProvider:
    """An :class:`~trust.tee.evidence.EvidenceProvider` over configfs-tsm.

    Args:
        root: the report root (default ``/sys/kernel/config/tsm/report``).
        expected_provider: refuse a report from another provider (``tdx_guest``, ``sev_guest``,
            ``arm_cca_guest``); None accepts any of them.
        ops: file operations (tests lay out a temporary directory with them).
    """

    recorded = False

    def __init__(
        self, root: Path = DEFAULT_ROOT, expected_provider: str | None = None, ops: ConfigfsOps | None = None
    ) -> None:
        if expected_provider is not None and expected_provider not in PROVIDERS:
            raise ValueError(f"unknown configfs-tsm provider {expected_provider!r}; known: {sorted(PROVIDERS)}")
        self.root = Path(root)
        self.expected_provider = expected_provider
        self.ops = ops or ConfigfsOps()
        self._tee = PROVIDERS[expected_provider] if expected_provider else None

    @property
    def tee(self) -> str:
        """The KBS TEE name (``tdx``, ``snp``, ``cca``): the expected provider's, or the one a probe
        report names. Raises EvidenceError (``provider_missing``, ``provider_error``)."""
        if self._tee is None:
            self._tee = PROVIDERS[self._probe()]
        return self._tee

    def _probe(self) -> str:
        if not self.root.is_dir():
            raise EvidenceError(
                TeeReason.PROVIDER_MISSING, f"no configfs-tsm report directory at {self.root} (no TEE guest?)"
            )
        report = self.root / f"xinserve-{secrets.token_hex(8)}"
        try:
            self.ops.mkdir(report)
        except OSError as exc:
            raise EvidenceError(TeeReason.PROVIDER_ERROR, f"cannot create a report: {exc.strerror}") from None
        try:
            provider = self.ops.read(report / "provider", 256).decode("ascii", "replace").strip()
        except OSError as exc:
            raise EvidenceError(TeeReason.PROVIDER_ERROR, f"cannot read the provider: {exc.strerror}") from None
        finally:
            try:
                self.ops.rmdir(report)
            except OSError:
                pass
        if provider not in PROVIDERS:
            raise EvidenceError(TeeReason.PROVIDER_ERROR, f"unknown configfs-tsm provider {provider[:40]!r}")
        return provider

    def collect(self, report_data: bytes) -> Evidence:
        """Write ``report_data`` (≤ 64 bytes) to a fresh report and read its evidence.

        Raises:
            EvidenceError: ``report_data_size`` (empty or over 64 bytes), ``provider_missing`` (no
                configfs-tsm under root), ``provider_mismatch``, ``concurrent_writer`` (generation
                moved on every attempt), ``provider_error`` (the kernel refused, or answered garbage).
        """
        data = padded_report_data(report_data)
        if not self.root.is_dir():
            raise EvidenceError(
                TeeReason.PROVIDER_MISSING, f"no configfs-tsm report directory at {self.root} (no TEE guest?)"
            )
        last: EvidenceError | None = None
        for _ in range(MAX_ATTEMPTS):
            try:
                return self._attempt(data)
            except EvidenceError as exc:
                if exc.reason is not TeeReason.CONCURRENT_WRITER:
                    raise
                last = exc
        assert last is not None
        raise last

    def _attempt(self, data: bytes) -> Evidence:
        report = self.root / f"xinserve-{secrets.token_hex(8)}"
        try:
            self.ops.mkdir(report)
        except FileNotFoundError:
            raise EvidenceError(TeeReason.PROVIDER_MISSING, f"{self.root} vanished") from None
        except OSError as exc:
            raise EvidenceError(TeeReason.PROVIDER_ERROR, f"cannot create a report: {exc.strerror}") from None
        try:
            return self._use(report, data)
        finally:
            try:
                self.ops.rmdir(report)
            except OSError:
                pass

    def _use(self, report: Path, data: bytes) -> Evidence:
        try:
            provider = self.ops.read(report / "provider", 256).decode("ascii", "replace").strip()
            if provider not in PROVIDERS:
                raise EvidenceError(TeeReason.PROVIDER_ERROR, f"unknown configfs-tsm provider {provider[:40]!r}")
            if self.expected_provider is not None and provider != self.expected_provider:
                raise EvidenceError(
                    TeeReason.PROVIDER_MISMATCH, f"configfs-tsm provider is {provider}, not {self.expected_provider}"
                )
            before = _generation(self.ops.read(report / "generation", 64))
            self.ops.write(report / "inblob", data)
            outblob = self.ops.read(report / "outblob")
            aux = self._optional(report / "auxblob")
            manifest = self._optional(report / "manifestblob")
            after = _generation(self.ops.read(report / "generation", 64))
        except EvidenceError:
            raise
        except OSError as exc:
            raise EvidenceError(
                TeeReason.PROVIDER_ERROR, f"configfs-tsm refused the report: {exc.strerror or 'I/O error'}"
            ) from None
        if after != before + 1:
            raise EvidenceError(
                TeeReason.CONCURRENT_WRITER,
                f"configfs-tsm generation went from {before} to {after}: another writer used the report",
            )
        if not outblob:
            raise EvidenceError(TeeReason.PROVIDER_ERROR, "configfs-tsm returned an empty outblob")
        return Evidence(
            tee=PROVIDERS[provider],
            raw=outblob,
            report_data=data,
            aux=aux,
            manifest=manifest,
            generation=after,
            provider=provider,
        )

    def _optional(self, path: Path) -> bytes:
        try:
            return self.ops.read(path)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENOTTY, errno.ENXIO):
                return b""
            raise
