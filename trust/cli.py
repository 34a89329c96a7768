"""``xinserve keys|sign|verify``: key generation, model and image signing, verification.

Exit codes: 0 ok · 1 verification failed · 2 usage or bad input (bad key, bad option) ·
3 environment error (missing file or directory, I/O). No stack trace and no key material is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from trust.errors import KeyFormatError, Reason, SigningError, TrustError, TrustStoreError, VerificationError
from trust.key_files import read_private_key

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ENV = 3

_ENV_REASONS = {Reason.IO_ERROR}
_EPILOG = (
    "exit codes: 0 ok, 1 verification failed, 2 usage or bad input (key, password, trust store), "
    "3 environment error (missing file or directory, I/O). Format and key handling: docs/signing.md"
)


def _err(msg: str) -> None:
    print(f"xinserve: {msg}", file=sys.stderr)


@contextmanager
def _progress(enabled: bool, desc: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """(on_total, advance) callbacks driving a tqdm byte bar on stderr (disabled off a TTY)."""
    from tqdm import tqdm

    bar = tqdm(
        total=0,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=desc,
        disable=not enabled or not sys.stderr.isatty(),
        file=sys.stderr,
        leave=False,
    )

    def on_total(n: int) -> None:
        bar.total = n
        bar.refresh()

    try:
        yield on_total, bar.update
    finally:
        bar.close()


def _trust_store(path: str) -> Any:
    from trust.trust_store import TrustStore

    if not Path(path).is_dir():
        raise FileNotFoundError(2, "trust store directory not found", path)
    return TrustStore.load(path)


def _run(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Map the trust layer's exceptions to exit codes and one-line messages."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except VerificationError as e:
            if getattr(args, "json", False):
                print(json.dumps({"ok": False, "reason": e.reason.value, "detail": e.detail}))
            _err(f"verification FAILED [{e.reason.value}]: {e.detail}")
            return EXIT_ENV if e.reason in _ENV_REASONS else EXIT_FAILED
        except SigningError as e:
            _err(f"cannot sign [{e.reason}]: {e.detail}")
            return EXIT_ENV if e.reason == Reason.IO_ERROR.value else EXIT_USAGE
        except (KeyFormatError, TrustStoreError, ValueError) as e:
            _err(str(e))
            return EXIT_USAGE
        except FileNotFoundError as e:
            _err(f"{e.strerror or 'no such file or directory'}: {e.filename}")
            return EXIT_ENV
        except FileExistsError as e:
            _err(f"{e.filename} exists (use --force to overwrite)")
            return EXIT_USAGE
        except OSError as e:
            _err(f"{e.filename or ''}: {e.strerror or e}")
            return EXIT_ENV
        except TrustError as e:
            _err(str(e))
            return EXIT_FAILED

    return wrapped


# --- keys ----------------------------------------------------------------------------------------


def _write_new(path: Path, data: bytes, mode: int, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _keys_generate(args: argparse.Namespace) -> int:
    from trust.key_files import MIN_NEW_KEY_PASSWORD_LENGTH, read_password_spec
    from trust.sm2 import Sm2PrivateKey

    password = read_password_spec(args.password, min_length=MIN_NEW_KEY_PASSWORD_LENGTH) if args.password else None
    if password is None and not args.no_password:
        _err("give --password env:VAR|file:PATH to protect the private key, or --no-password")
        return EXIT_USAGE
    key = Sm2PrivateKey.generate()
    priv = Path(args.private_key)
    pub = Path(args.public_key) if args.public_key else priv.with_suffix(".pub.pem")
    _write_new(priv, key.to_pem(password), 0o600, args.force)
    _write_new(pub, key.public_key().to_pem(), 0o644, args.force)
    print(f"private key: {priv} (mode 0600{', password-protected' if password else ', NOT encrypted'})")
    print(f"public key:  {pub}")
    print(f"key id:      {key.public_key().key_id}")
    return EXIT_OK


def _keys_id(args: argparse.Namespace) -> int:
    from trust.sm2 import Sm2PublicKey

    print(Sm2PublicKey.from_pem(Path(args.public_key).read_bytes()).key_id)
    return EXIT_OK


def _time(value: str | None) -> datetime | None:
    from trust.trust_store import _parse_time

    try:
        return _parse_time(value, "time")
    except TrustStoreError as e:
        raise ValueError(str(e)) from None


def _keys_trust(args: argparse.Namespace) -> int:
    from trust.sm2 import Sm2PublicKey
    from trust.trust_store import add_trusted_key

    pub = Sm2PublicKey.from_pem(Path(args.public_key).read_bytes())
    add_trusted_key(args.trust_store, pub, args.name, _time(args.not_before), _time(args.not_after))
    print(f"trusted {args.name}: {pub.key_id}")
    return EXIT_OK


def _keys_revoke(args: argparse.Namespace) -> int:
    from trust.trust_store import revoke_key

    revoke_key(args.trust_store, args.key_id, args.reason or "")
    print(f"revoked {args.key_id}")
    return EXIT_OK


# --- sign / verify ------------------------------------------------------------------------------


def _sign_model(args: argparse.Namespace) -> int:
    from trust.model_signing import DEFAULT_IGNORE, sign_model

    model_dir = Path(args.directory)
    if not model_dir.is_dir():
        _err(f"{model_dir} is not a directory")
        return EXIT_ENV
    key = read_private_key(args.key, args.password)
    ignore = list(DEFAULT_IGNORE) + list(args.ignore or [])
    name = args.name or model_dir.resolve().name
    with _progress(not args.no_progress, "hashing") as (on_total, advance):
        out = sign_model(model_dir, key, name, ignore=ignore, jobs=args.jobs, progress=advance, on_total=on_total)
    print(f"signed model {name!r}: {out}")
    print(f"key id: {key.public_key().key_id}")
    return EXIT_OK


def _verify_model(args: argparse.Namespace) -> int:
    from trust.model_signing import verify_model

    store = _trust_store(args.trust_store)
    with _progress(not args.no_progress, "verifying") as (on_total, advance):
        res = verify_model(args.directory, store, args.name, jobs=args.jobs, progress=advance, on_total=on_total)
    if args.json:
        print(json.dumps({"ok": True, **res.__dict__}))
    else:
        print(
            f"OK: model {res.model_name!r} ({res.files} files, {res.total_bytes} bytes) "
            f"manifest {res.manifest_digest}, signed by {res.key_name} ({res.key_id[:16]})"
        )
    return EXIT_OK


def _sign_image(args: argparse.Namespace) -> int:
    from trust.image_signing import sign_image, sign_image_layout

    key = read_private_key(args.key, args.password)
    if args.layout:
        envelope, desc = sign_image_layout(args.layout, key, args.reference, ref_name=args.ref_name, attach=args.attach)
        digest = desc.digest
    else:
        if args.attach:
            _err("--attach needs --layout")
            return EXIT_USAGE
        envelope = sign_image(args.digest, args.reference, key)
        digest = args.digest
    if args.output:
        Path(args.output).write_bytes(envelope)
    elif not args.attach:
        _err("give --output FILE (and/or --attach with --layout)")
        return EXIT_USAGE
    print(f"signed image {args.reference}@{digest}" + (f": {args.output}" if args.output else ""))
    if args.attach:
        print(f"attached as an OCI referrer in {args.layout}")
    return EXIT_OK


def _verify_image(args: argparse.Namespace) -> int:
    from trust.image_signing import verify_image, verify_image_layout

    store = _trust_store(args.trust_store)
    envelope = Path(args.signature).read_bytes() if args.signature else None
    if args.layout:
        res = verify_image_layout(
            args.layout, store, envelope=envelope, reference=args.reference, ref_name=args.ref_name
        )
    else:
        if envelope is None:
            _err("--digest needs --signature FILE")
            return EXIT_USAGE
        res = verify_image(envelope, store, args.digest, reference=args.reference)
    if args.json:
        print(json.dumps({"ok": True, **res.__dict__}))
    else:
        checked = f"; {res.blobs} blobs ({res.total_bytes} bytes) match their digests" if res.blobs else ""
        print(f"OK: image {res.reference}@{res.digest} signed by {res.key_name} ({res.key_id[:16]}){checked}")
    return EXIT_OK


# --- argparse wiring ------------------------------------------------------------------------------


def _add_key_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, help="SM2 private key, PKCS#8 PEM")
    p.add_argument(
        "--password",
        metavar="env:VAR|file:PATH",
        help="where to read the private key's password (never on the command line)",
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=None, help="hashing threads (default: CPU count)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_commands(subparsers: Any) -> None:
    """Register ``keys``, ``sign``, ``verify`` and ``encrypt`` on the ``xinserve`` command's subparsers."""
    keys = subparsers.add_parser("keys", help="generate SM2 keys, manage a trust store")
    ks = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    g = ks.add_parser("generate", help="generate an SM2 key pair (PKCS#8 + SubjectPublicKeyInfo PEM)", epilog=_EPILOG)
    g.add_argument("--private-key", required=True, help="where to write the private key (mode 0600)")
    g.add_argument("--public-key", help="where to write the public key (default: <private>.pub.pem)")
    g.add_argument("--password", metavar="env:VAR|file:PATH", help="encrypt the private key (SM4-CBC, PBKDF2)")
    g.add_argument("--no-password", action="store_true", help="write the private key unencrypted")
    g.add_argument("--force", action="store_true", help="overwrite existing files")
    g.set_defaults(func=_run(_keys_generate))
    i = ks.add_parser("id", help="print a public key's key id (hex SM3 of its DER)")
    i.add_argument("public_key")
    i.set_defaults(func=_run(_keys_id))
    t = ks.add_parser("trust", help="add a public key to a trust store directory")
    t.add_argument("public_key")
    t.add_argument("--trust-store", required=True)
    t.add_argument("--name", required=True)
    t.add_argument("--not-before", help="RFC 3339 time, e.g. 2026-01-01T00:00:00Z")
    t.add_argument("--not-after", help="RFC 3339 time")
    t.set_defaults(func=_run(_keys_trust))
    r = ks.add_parser("revoke", help="add a key id to a trust store's revocation list")
    r.add_argument("key_id")
    r.add_argument("--trust-store", required=True)
    r.add_argument("--reason")
    r.set_defaults(func=_run(_keys_revoke))

    sign = subparsers.add_parser("sign", help="sign a model directory or a container image with SM2")
    ss = sign.add_subparsers(dest="sign_command", metavar="WHAT", required=True)
    sm = ss.add_parser(
        "model",
        help="hash every file (SM3) and write a detached DSSE signature into DIR",
        description="Hash every file of DIR with SM3 (in parallel), sign the canonical manifest with SM2 and "
        "write it as DIR/xinserve-model.sig.dsse.json (replacing an older one).",
        epilog=_EPILOG,
    )
    sm.add_argument("directory", metavar="DIR", help="the model directory")
    _add_key_args(sm)
    sm.add_argument("--name", help="model name in the signature (default: the directory name)")
    sm.add_argument(
        "--ignore", action="append", metavar="PATTERN", help="fnmatch pattern to leave out; dir/ for a tree"
    )
    _add_common(sm)
    sm.set_defaults(func=_run(_sign_model))
    si = ss.add_parser(
        "image",
        help="sign an OCI image by digest or from an OCI image layout",
        description="Sign the digest an image is named by: the one given, or the descriptor index.json of "
        "an OCI layout points to (the image index for a multi-platform image).",
        epilog=_EPILOG,
    )
    src = si.add_mutually_exclusive_group(required=True)
    src.add_argument("--digest", help="sha256:<hex> of the image manifest or index")
    src.add_argument("--layout", help="OCI image-layout directory (index.json)")
    si.add_argument("--reference", required=True, help="image reference, e.g. registry/repo:tag")
    si.add_argument("--ref-name", help="pick the image by org.opencontainers.image.ref.name in index.json")
    si.add_argument("--output", "-o", help="write the DSSE envelope here")
    si.add_argument("--attach", action="store_true", help="also attach the signature as an OCI referrer")
    _add_key_args(si)
    si.set_defaults(func=_run(_sign_image))

    verify = subparsers.add_parser("verify", help="verify a model directory or an image against a trust store")
    vs = verify.add_subparsers(dest="verify_command", metavar="WHAT", required=True)
    vm = vs.add_parser(
        "model",
        help="verify DIR's signature and every file's SM3 digest",
        description="Check DIR/xinserve-model.sig.dsse.json against the trust store, then that DIR holds "
        "exactly the signed files with the signed SM3 digests. On failure prints a reason code "
        "(unsigned, file_modified, file_added, untrusted_key, ...).",
        epilog=_EPILOG,
    )
    vm.add_argument("directory", metavar="DIR", help="the model directory")
    vm.add_argument("--trust-store", required=True, metavar="DIR", help="trust store directory")
    vm.add_argument("--name", help="require this model name in the signature")
    vm.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    _add_common(vm)
    vm.set_defaults(func=_run(_verify_model))
    vi = vs.add_parser(
        "image",
        help="verify an image signature",
        description="With --digest: check that the signature covers that digest. With --layout: check "
        "the signature over the image index.json points to, then every blob it references (nested "
        "indexes, manifests, config, layers): each must exist, have its descriptor's size and hash to "
        "its digest (sha256 or sha512).",
        epilog=_EPILOG,
    )
    src = vi.add_mutually_exclusive_group(required=True)
    src.add_argument("--digest", help="sha256:<hex> the signature must cover")
    src.add_argument("--layout", help="OCI image-layout directory")
    vi.add_argument("--signature", help="DSSE envelope file (default with --layout: attached referrers)")
    vi.add_argument("--reference", help="require this image reference in the signature")
    vi.add_argument("--ref-name", help="pick the image by ref.name annotation in index.json")
    vi.add_argument("--trust-store", required=True, metavar="DIR", help="trust store directory")
    vi.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    vi.set_defaults(func=_run(_verify_image))

    from trust.tee.cli import add_commands as add_tee_commands

    add_tee_commands(subparsers, _run, _EPILOG)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m trust.cli``) when the service package is absent."""
    parser = argparse.ArgumentParser(prog="xinserve")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
