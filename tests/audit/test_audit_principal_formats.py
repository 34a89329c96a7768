"""Principal filters pasted from every ``openssl x509 -noout -subject -nameopt`` layout: each
either finds the certificate's stored principal or is refused with an error (CLI exit 2,
``AuditService`` INVALID_ARGUMENT), never an empty answer that reads as "no activity"."""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from audit_helpers import Backend, rpc_record_factory
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import audit.cli
from audit.log import AuditLog
from audit.principals import PrincipalFilterError, principal_candidates, render_name
from service.core.call_context import CallRecord
from service.core.status import RpcError
from service.frontends.grpc.audit_servicer import _filter
from xinserve.v1 import audit_pb2

NAMEOPTS = ("compat", "oneline", "RFC2253", "multiline", "sep_semi_plus_space", "sep_comma_plus_space", "utf8")
CN, ORG, OU, C, UID = (
    NameOID.COMMON_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.COUNTRY_NAME,
    NameOID.USER_ID,
)
_KEY = ec.generate_private_key(ec.SECP256R1())

SIMPLE = [[(C, "CN")], [(ORG, "Bank")], [(CN, "teller-8")]]
COMMA = [[(C, "CN")], [(ORG, "Bank, Ltd")], [(CN, "teller-8")]]
RICH = [[(C, "CN")], [(ORG, "中国银行 a/b=c;d")], [(CN, "teller+8"), (UID, "u-8")], [(OU, "x\\y")]]

# (subject, nameopts that cannot carry it unambiguously and must be refused)
CASES = {
    "simple": (SIMPLE, frozenset()),
    "comma_in_value": (COMMA, frozenset({"sep_comma_plus_space", "utf8"})),
    "multi_valued_chinese_specials": (RICH, frozenset()),
}


def _pem(rdns: list[list[tuple[x509.ObjectIdentifier, str]]], path: Path) -> x509.Name:
    name = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in rdn]) for rdn in rdns])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(CN, "test CA")]))
        .public_key(_KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(_KEY, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return x509.load_pem_x509_certificate(path.read_bytes()).subject


def _openssl() -> str:
    found = shutil.which("openssl")
    if found is None:
        pytest.skip("the openssl command is not installed")
    return found


def _printed(cert: Path, nameopt: str) -> str:
    """What an auditor pastes: ``$(openssl x509 -noout -subject -nameopt X | sed s/^subject=//)``."""
    show = [_openssl(), "x509", "-in", str(cert), "-noout", "-subject", "-nameopt", nameopt]
    out = subprocess.run(show, check=True, capture_output=True, text=True, encoding="utf-8").stdout
    assert out.startswith("subject=")
    return out.removeprefix("subject=").rstrip("\n")  # $(...) drops trailing newlines


@pytest.mark.parametrize("nameopt", NAMEOPTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_openssl_layout_matches_or_is_refused(tmp_path: Path, case: str, nameopt: str) -> None:
    rdns, refused = CASES[case]
    stored = render_name(_pem(rdns, tmp_path / "c.pem"))
    typed = _printed(tmp_path / "c.pem", nameopt)
    if nameopt in refused:
        with pytest.raises(PrincipalFilterError, match="has no '='"):
            principal_candidates(typed)
    else:
        assert stored in principal_candidates(typed), (nameopt, typed)


def test_layout_readings_are_exact() -> None:
    stored = "CN=teller-8,O=Bank,C=CN"
    assert stored in principal_candidates("/C=CN/O=Bank/CN=teller-8")
    assert stored in principal_candidates("C=CN; O=Bank; CN=teller-8")
    assert stored in principal_candidates(
        "\n    countryName = CN\n    organizationName = Bank\n    commonName = teller-8"
    )
    assert "CN=teller\\+8+UID=u,C=CN" in principal_candidates("/C=CN/CN=teller\\+8+UID=u")
    assert "CN=中+UID=u,C=CN" in principal_candidates("C=CN, CN=\\U4E2D + UID=u")
    assert stored not in principal_candidates("/C=CN/O=Bank/CN=teller-9")
    assert stored not in principal_candidates("C=CN; O=bank; CN=teller-8")
    # not a distinguished name: only itself, no error
    assert principal_candidates("svc-a") == ("svc-a",)
    assert principal_candidates("x=1;y") == ("x=1;y",)
    for bad in ("O=Bank, Ltd, CN=t", "/C=CN/O=a/b", "CN=t; nosuch", "CN=t, FOO=1"):
        with pytest.raises(PrincipalFilterError):
            principal_candidates(bad)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xinserve")
    sub = parser.add_subparsers(dest="command", required=True)
    audit.cli.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


async def test_export_cli_compat_finds_and_ambiguous_exits_2(
    sqlite_backend: Backend, key, tmp_path: Path, monkeypatch, capsys
) -> None:
    simple = render_name(_pem(SIMPLE, tmp_path / "s.pem"))
    comma = render_name(_pem(COMMA, tmp_path / "c.pem"))
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    try:
        await log.append(make(1, principal=simple))
        await log.append(make(2, principal=comma))
    finally:
        await log.close()
    monkeypatch.chdir(tmp_path)
    argv = ["audit", "export", "--store", str(sqlite_backend.path)]
    for i, nameopt in enumerate(("compat", "multiline", "sep_semi_plus_space")):
        out = f"{i}.jsonl"
        assert _run([*argv, "--principal", _printed(tmp_path / "s.pem", nameopt), "-o", out]) == 0
        lines = (tmp_path / out).read_text(encoding="utf-8").splitlines()
        assert [json.loads(x)["principal"] for x in lines] == [simple], nameopt
    capsys.readouterr()
    assert _run([*argv, "--principal", _printed(tmp_path / "c.pem", "utf8"), "-o", "x.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "cannot be read unambiguously" in err and "RFC2253" in err


def test_audit_service_refuses_an_ambiguous_principal_with_invalid_argument() -> None:
    info = CallRecord(method="/xinserve.v1.AuditService/ExportRecords", peer="test", request_id=None, trace_id=None)
    ok = audit_pb2.ExportRecordsRequest(filter=audit_pb2.AuditFilter(principal="/C=CN/O=Bank/CN=teller-8"))
    assert "CN=teller-8,O=Bank,C=CN" in (_filter(ok, info).principal_any or ())
    bad = audit_pb2.ExportRecordsRequest(filter=audit_pb2.AuditFilter(principal="C=CN, O=Bank, Ltd, CN=teller-8"))
    with pytest.raises(RpcError) as caught:
        _filter(bad, info)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in caught.value.violations] == ["filter.principal"]
