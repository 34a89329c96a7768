"""Read an OCI image layout and check every blob an image references against its descriptor.

Follows the OCI image spec v1.1 (``image-layout.md``, ``descriptor.md``, ``manifest.md``,
``image-index.md``): ``index.json`` lists descriptors; a blob lives at
``blobs/<algorithm>/<encoded>``; a descriptor's ``digest`` is ``<algorithm>:<encoded>`` and its
``size`` the blob's length in bytes. The registered algorithms are accepted: ``sha256`` (64
lower-case hex digits) and ``sha512`` (128). Docker's schema-2 manifest and manifest-list media
types are read like their OCI equivalents.

:meth:`OciLayout.verify_tree` walks from one descriptor through nested image indexes to image
manifests and their config and layer blobs. Every blob must exist as a regular file (opened
without following a symbolic link, also for the ``blobs`` and ``blobs/<algorithm>``
directories: :func:`open_layout_file`), have exactly
the descriptor's size (checked before hashing) and hash to its digest (streamed, 1 MiB reads).
Every failure is a :class:`~trust.errors.VerificationError` whose detail names the blob's digest:

* ``malformed_image``: a descriptor, index or manifest not as the spec says (JSON over 16 MiB,
  not strict JSON, a digest outside the spec's grammar or of the wrong length, a ``mediaType``
  differing from its descriptor's, nesting deeper than :data:`MAX_DEPTH`, more than
  :data:`MAX_DESCRIPTORS` descriptors);
* ``unsupported_digest``: a well-formed digest of an algorithm other than sha256/sha512;
* ``file_missing``: no blob at ``blobs/<algorithm>/<encoded>``;
* ``unsupported_file``: the blob, or a directory on its way, is a symbolic link, or the blob is
  a directory, FIFO, device or socket;
* ``file_size_changed``: the blob's size differs from the descriptor's;
* ``file_modified``: the blob's bytes do not hash to the digest;
* ``io_error``: the blob exists but cannot be read.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trust.dsse import strict_json
from trust.errors import Reason, VerificationError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})

ALGORITHMS: dict[str, int] = {"sha256": 64, "sha512": 128}
"""Digest algorithm -> length of its lower-case hex encoding."""
MAX_JSON_BYTES = 16 << 20
"""Largest index or manifest blob that is parsed (bytes)."""
MAX_DEPTH = 8
"""Deepest nesting of image indexes below the signed descriptor."""
MAX_DESCRIPTORS = 100_000
"""Most descriptors one image may reference, all levels together."""
_CHUNK = 1 << 20
# descriptor.md: algorithm-component ":" encoded, with the grammar's separators.
_DIGEST_GRAMMAR = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+")
_HEX = re.compile(r"[0-9a-f]+")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: ``mediaType``, ``digest`` (``<alg>:<hex>``), ``size`` (bytes)."""

    media_type: str
    digest: str
    size: int
    ref_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class TreeCheck:
    """What :meth:`OciLayout.verify_tree` checked: distinct blobs and their bytes in total."""

    blobs: int
    total_bytes: int


def _short(digest: str) -> str:
    """A digest for a message: printable, at most 80 characters (hostile input is cut)."""
    text = digest if isinstance(digest, str) else repr(digest)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 80 else text[:77] + "..."


def check_digest(digest: Any) -> tuple[str, str]:
    """``(algorithm, hex)`` of a descriptor digest.

    Raises:
        VerificationError: ``malformed_image`` (not the spec's grammar, wrong length or case of
            the hex), ``unsupported_digest`` (an algorithm other than sha256/sha512).
    """
    if not isinstance(digest, str) or not _DIGEST_GRAMMAR.fullmatch(digest):
        raise VerificationError(Reason.MALFORMED_IMAGE, f"digest {_short(digest)!r} is not <algorithm>:<encoded>")
    algorithm, encoded = digest.split(":", 1)
    if algorithm not in ALGORITHMS:
        raise VerificationError(
            Reason.UNSUPPORTED_DIGEST, f"digest {_short(digest)!r}: algorithm {algorithm!r} is not sha256 or sha512"
        )
    if len(encoded) != ALGORITHMS[algorithm] or not _HEX.fullmatch(encoded):
        raise VerificationError(
            Reason.MALFORMED_IMAGE,
            f"digest {_short(digest)!r}: {algorithm} needs {ALGORITHMS[algorithm]} lower-case hex digits",
        )
    return algorithm, encoded


def parse_descriptor(raw: Any, where: str) -> Descriptor:
    """A :class:`Descriptor` from its JSON object; ``where`` names it in errors.

    Raises:
        VerificationError: ``malformed_image`` or ``unsupported_digest``.
    """
    if not isinstance(raw, dict):
        raise VerificationError(Reason.MALFORMED_IMAGE, f"{where} is not a descriptor object")
    media_type, digest, size = raw.get("mediaType"), raw.get("digest"), raw.get("size")
    if not isinstance(media_type, str) or not media_type:
        raise VerificationError(Reason.MALFORMED_IMAGE, f"{where} has no mediaType")
    check_digest(digest)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise VerificationError(Reason.MALFORMED_IMAGE, f"{where} ({digest}) has no valid size")
    annotations = raw.get("annotations")
    ref_name = None
    if annotations is not None:
        if not isinstance(annotations, dict):
            raise VerificationError(Reason.MALFORMED_IMAGE, f"{where} ({digest}) has malformed annotations")
        ref = annotations.get("org.opencontainers.image.ref.name")
        ref_name = ref if isinstance(ref, str) else None
    return Descriptor(media_type, str(digest), size, ref_name)


class SymlinkError(OSError):
    """A part of a layout path is a symbolic link (layout content must be regular files)."""


def open_layout_file(root: str | os.PathLike[str], *parts: str) -> int:
    """A read-only descriptor of ``root/<parts...>``, no part a symbolic link (``root`` itself
    may be one). Directories are opened with ``O_DIRECTORY | O_NOFOLLOW`` and the file with
    ``O_NOFOLLOW | O_NONBLOCK`` relative to them (``openat``), so a symlink swapped in at any
    level is refused, and a FIFO opens at once instead of hanging. The caller checks the
    file's type with ``fstat`` and closes the descriptor.

    Raises:
        FileNotFoundError: a part does not exist.
        IsADirectoryError, NotADirectoryError: a part is not of the expected kind.
        SymlinkError: a part is a symbolic link.
        OSError: any other failure to open.
    """
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                fd = os.open(part, flags, dir_fd=dir_fd)
            except OSError as e:
                if _is_link(dir_fd, part):
                    raise SymlinkError(e.errno, f"{part} is a symbolic link") from None
                raise
            os.close(dir_fd)
            dir_fd = fd
        return dir_fd
    except BaseException:
        os.close(dir_fd)
        raise


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class OciLayout:
    """An OCI image-layout directory, read without trusting anything in it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def blob_path(self, digest: str) -> Path:
        """``blobs/<algorithm>/<hex>`` of a checked digest (no other path can come out)."""
        algorithm, encoded = check_digest(digest)
        return self.root / "blobs" / algorithm / encoded

    def _open(self, desc: Descriptor, what: str) -> int:
        algorithm, encoded = check_digest(desc.digest)
        try:
            fd = open_layout_file(self.root, "blobs", algorithm, encoded)
        except FileNotFoundError:
            raise VerificationError(Reason.FILE_MISSING, f"{what} {desc.digest} is missing from the layout") from None
        except SymlinkError:
            raise VerificationError(
                Reason.UNSUPPORTED_FILE, f"{what} {desc.digest} is reached through a symbolic link, not a regular file"
            ) from None
        except (IsADirectoryError, NotADirectoryError):
            raise VerificationError(Reason.UNSUPPORTED_FILE, f"{what} {desc.digest} is not a regular file") from None
        except OSError as e:
            raise VerificationError(Reason.IO_ERROR, f"{what} {desc.digest} cannot be read: {e.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise VerificationError(Reason.UNSUPPORTED_FILE, f"{what} {desc.digest} is not a regular file")
        if st.st_size != desc.size:
            os.close(fd)
            raise VerificationError(
                Reason.FILE_SIZE_CHANGED, f"{what} {desc.digest} is {st.st_size} bytes, its descriptor says {desc.size}"
            )
        return fd

    def verify_blob(self, desc: Descriptor, what: str = "blob") -> None:
        """Check that ``desc``'s blob exists, has its size and hashes to its digest (streamed).

        Raises:
            VerificationError: see the module docstring.
        """
        algorithm, encoded = check_digest(desc.digest)
        fd = self._open(desc, what)
        h = hashlib.new(algorithm)
        read = 0
        try:
            with os.fdopen(fd, "rb", buffering=0) as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
                    read += len(chunk)
        except OSError as e:
            raise VerificationError(Reason.IO_ERROR, f"{what} {desc.digest} cannot be read: {e.strerror}") from None
        if read != desc.size:  # changed while read
            raise VerificationError(Reason.FILE_SIZE_CHANGED, f"{what} {desc.digest} changed size while read")
        if h.hexdigest() != encoded:
            raise VerificationError(Reason.FILE_MODIFIED, f"{what} {desc.digest} does not match its digest")

    def read_blob(self, desc: Descriptor, what: str = "blob", limit: int = MAX_JSON_BYTES) -> bytes:
        """The bytes of ``desc``'s blob after the checks of :meth:`verify_blob` (at most ``limit``).

        Raises:
            VerificationError: see the module docstring; ``malformed_image`` over ``limit``.
        """
        algorithm, encoded = check_digest(desc.digest)
        if desc.size > limit:
            raise VerificationError(
                Reason.MALFORMED_IMAGE, f"{what} {desc.digest} is {desc.size} bytes, more than {limit} allowed"
            )
        fd = self._open(desc, what)
        try:
            with os.fdopen(fd, "rb", buffering=0) as f:
                data = f.read(desc.size + 1)
        except OSError as e:
            raise VerificationError(Reason.IO_ERROR, f"{what} {desc.digest} cannot be read: {e.strerror}") from None
        if len(data) != desc.size:
            raise VerificationError(Reason.FILE_SIZE_CHANGED, f"{what} {desc.digest} changed size while read")
        if hashlib.new(algorithm, data).hexdigest() != encoded:
            raise VerificationError(Reason.FILE_MODIFIED, f"{what} {desc.digest} does not match its digest")
        return data

    def read_json_blob(self, desc: Descriptor, what: str) -> Any:
        """``desc``'s blob checked as in :meth:`read_blob`, parsed as strict JSON."""
        return strict_json(self.read_blob(desc, what), f"{what} {desc.digest}", Reason.MALFORMED_IMAGE)

    def verify_tree(self, top: Descriptor) -> TreeCheck:
        """Verify ``top`` (an image index or manifest) and every blob it references, recursively.

        An index's ``manifests`` are followed (nested indexes included); a manifest's ``config``
        and ``layers`` are checked by digest and size. A manifest of another media type listed
        in an index is checked as a blob. A blob referenced twice is read once, but both
        descriptors must give the same size.

        Raises:
            VerificationError: see the module docstring; ``malformed_image`` when ``top`` is
                neither an image index nor an image manifest.
        """
        if top.media_type not in INDEX_TYPES | MANIFEST_TYPES:
            raise VerificationError(
                Reason.MALFORMED_IMAGE, f"{top.digest} has media type {top.media_type[:100]!r}, not an image"
            )
        seen: dict[str, int] = {}
        counted = [0]

        def once(desc: Descriptor) -> bool:
            if desc.digest in seen:
                if seen[desc.digest] != desc.size:
                    raise VerificationError(
                        Reason.FILE_SIZE_CHANGED,
                        f"{desc.digest} is described with sizes {seen[desc.digest]} and {desc.size}",
                    )
                return False
            counted[0] += 1
            if counted[0] > MAX_DESCRIPTORS:
                raise VerificationError(Reason.MALFORMED_IMAGE, f"the image references over {MAX_DESCRIPTORS} blobs")
            seen[desc.digest] = desc.size
            return True

        def own_media_type(doc: dict[str, Any], desc: Descriptor, what: str) -> None:
            mt = doc.get("mediaType")
            if mt is not None and mt != desc.media_type:
                raise VerificationError(
                    Reason.MALFORMED_IMAGE,
                    f"{what} {desc.digest} says mediaType {str(mt)[:100]!r}, its descriptor {desc.media_type[:100]!r}",
                )
            if doc.get("schemaVersion") != 2:
                raise VerificationError(Reason.MALFORMED_IMAGE, f"{what} {desc.digest} is not schemaVersion 2")

        def walk(desc: Descriptor, depth: int) -> None:
            if not once(desc):
                return
            if desc.media_type in INDEX_TYPES:
                if depth > MAX_DEPTH:
                    raise VerificationError(Reason.MALFORMED_IMAGE, f"image indexes nest deeper than {MAX_DEPTH}")
                doc = self.read_json_blob(desc, "image index")
                if not isinstance(doc, dict) or not isinstance(doc.get("manifests"), list):
                    raise VerificationError(Reason.MALFORMED_IMAGE, f"image index {desc.digest} has no manifests list")
                own_media_type(doc, desc, "image index")
                children = [
                    parse_descriptor(m, f"manifests[{i}] of image index {desc.digest}")
                    for i, m in enumerate(doc["manifests"])
                ]
                for child in children:
                    walk(child, depth + 1)
            elif desc.media_type in MANIFEST_TYPES:
                doc = self.read_json_blob(desc, "image manifest")
                if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
                    raise VerificationError(Reason.MALFORMED_IMAGE, f"image manifest {desc.digest} has no layers list")
                own_media_type(doc, desc, "image manifest")
                config = parse_descriptor(doc.get("config"), f"config of image manifest {desc.digest}")
                layers = [
                    parse_descriptor(x, f"layers[{i}] of image manifest {desc.digest}")
                    for i, x in enumerate(doc["layers"])
                ]
                if once(config):
                    self.verify_blob(config, "config")
                for i, layer in enumerate(layers):
                    if once(layer):
                        self.verify_blob(layer, f"layer {i}")
            else:
                self.verify_blob(desc, "manifest")

        walk(top, 0)
        return TreeCheck(len(seen), sum(seen.values()))
