"""``xinserve encrypt model DIR --key-id REPO/TYPE/TAG --key-file KEY -o OUT [--sign-key SM2 --name NAME]``.

Encrypts every file of DIR with SM4-GCM into OUT (trust.tee.model_encryption) and, with
``--sign-key``, signs OUT with SM2 (the signature covers the ciphertext and the manifest, so it
verifies without the key). ``--key-file`` holds the 16-byte SM4 key as 32 hex characters; when the
file does not exist a fresh key is written there (mode 0600) for the operator to upload to the KBS
as resource ``--key-id``. The key is never printed.

Exit codes as ``xinserve sign``: 0 ok, 2 usage or bad input, 3 environment error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trust import sm4


def _load_key(path: Path) -> bytes | None:
    """The SM4 key in ``path``, ``None`` when the file does not exist (a new key is to be made)."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{path} does not hold a hex SM4 key") from None
    if len(key) != sm4.KEY_SIZE:
        raise ValueError(f"{path} does not hold a 16-byte SM4 key (32 hex characters)")
    return key


def _write_new_key(path: Path, key: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")


def _encrypt_model(args: argparse.Namespace) -> int:
    """Everything is checked (signing key included) before anything is written; the encrypted
    (and signed) directory is built next to ``--output`` and renamed into place at the end, so a
    failure leaves neither an output directory nor a new key file behind."""
    from trust.errors import KeyFormatError
    from trust.tee.model_encryption import encrypt_model

    source = Path(args.directory)
    if not source.is_dir():
        raise FileNotFoundError(2, "model directory not found", str(source))
    signer = None
    if args.sign_key:
        from trust.key_files import read_private_key

        try:
            signer = read_private_key(args.sign_key, args.password)
        except KeyFormatError as exc:
            raise KeyFormatError(f"--sign-key: {exc}") from None
    key_file = Path(args.key_file)
    key = _load_key(key_file)
    created = key is None
    if key is None:
        key = sm4.generate_key()
    output = Path(args.output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"{output} exists and is not an empty directory")
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
    try:
        model = encrypt_model(source, staging, key, args.key_id)
        name = args.name or source.resolve().name
        signature = None
        if signer is not None:
            from trust.model_signing import sign_model

            signature = sign_model(staging, signer, name)
        if created:
            _write_new_key(key_file, key)
        try:
            umask = os.umask(0o022)
            os.umask(umask)
            os.chmod(staging, 0o777 & ~umask)
            os.replace(staging, output)
        except BaseException:
            if created:
                key_file.unlink(missing_ok=True)
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(f"encrypted {len(model.files)} files into {args.output} (SM4-GCM, key id {model.key_id})")
    print(f"plaintext manifest digest: {model.plaintext_manifest_digest}")
    if created:
        print(f"a new SM4 key was written to {args.key_file}: store it in the KBS as resource {model.key_id}")
    if signature is not None:
        print(f"signed encrypted model {name!r}: {output / signature.name}")
    return 0


def add_commands(subparsers: Any, run: Any, epilog: str) -> None:
    """Register ``encrypt model``; ``run`` maps trust exceptions to exit codes (trust.cli._run)."""
    encrypt = subparsers.add_parser("encrypt", help="encrypt a model directory with SM4-GCM for key release by a KBS")
    es = encrypt.add_subparsers(dest="encrypt_command", metavar="WHAT", required=True)
    em = es.add_parser(
        "model",
        help="encrypt every file of DIR with SM4-GCM into OUT (docs/tee.md)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
    )
    em.add_argument("directory", metavar="DIR", help="the plaintext model directory")
    em.add_argument("--key-id", required=True, help="KBS resource id of the key: <repository>/<type>/<tag>")
    em.add_argument("--key-file", required=True, help="SM4 key as hex; created (mode 0600) if it does not exist")
    em.add_argument("-o", "--output", required=True, help="new or empty output directory")
    em.add_argument("--sign-key", help="SM2 private key (PKCS#8 PEM) to sign the encrypted directory with")
    em.add_argument("--password", metavar="env:VAR|file:PATH", help="password of --sign-key")
    em.add_argument("--name", help="model name in the signature (default: DIR's name)")
    em.set_defaults(func=run(_encrypt_model))
