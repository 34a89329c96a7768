"""mTLS principal strings: one canonical form rendered from real certificates (multi-valued
RDNs, escaped commas, Chinese text, control and bidi characters escaped), and principal
filters that accept what an auditor types (either RDN order, any attribute-type case, spaces
after commas) on both stores and in ``xinserve audit export``."""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from audit_helpers import Backend, rpc_record_factory
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

import audit.cli
from audit.log import AuditLog
from audit.principals import display_safe, parse_name, principal_candidates, render_name
from audit.stores.base import QueryFilter

_KEY = ec.generate_private_key(ec.SECP256R1())
_DISPLAY_CHANGING = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})


def cert_subject(*rdns: list[tuple[x509.ObjectIdentifier, str]]) -> x509.Name:
    """The subject of a real certificate (built, signed, DER-encoded and parsed back) whose
    subject holds ``rdns`` in this order (first = first in the certificate's sequence)."""
    name = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in rdn]) for rdn in rdns])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")]))
        .public_key(_KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(_KEY, hashes.SHA256())
    )
    return x509.load_der_x509_certificate(cert.public_bytes(serialization.Encoding.DER)).subject


CN, ORG, OU, C, UID = (
    NameOID.COMMON_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.COUNTRY_NAME,
    NameOID.USER_ID,
)
# `openssl req -subj "/CN=teller-7/O=Bank"` puts CN first; a CA usually issues O first.
TELLER_OPENSSL_ORDER = cert_subject([(CN, "teller-7")], [(ORG, "Bank")])
TELLER_CA_ORDER = cert_subject([(ORG, "Bank")], [(CN, "teller-7")])


def _safe_to_display(text: str) -> bool:
    return all(
        unicodedata.category(ch) not in _DISPLAY_CHANGING and (unicodedata.category(ch) != "Zs" or ch == " ")
        for ch in text
    )


def test_canonical_form_is_rfc4514_of_the_certificate() -> None:
    assert render_name(TELLER_CA_ORDER) == "CN=teller-7,O=Bank" == TELLER_CA_ORDER.rfc4514_string()
    assert render_name(TELLER_OPENSSL_ORDER) == "O=Bank,CN=teller-7" == TELLER_OPENSSL_ORDER.rfc4514_string()


@pytest.mark.parametrize(
    ("rdns", "expected"),
    [
        # multi-valued RDN: sorted by rendered text whatever order it was built in
        ([[(ORG, "Bank")], [(UID, "u-7"), (CN, "teller-7")]], "CN=teller-7+UID=u-7,O=Bank"),
        # escaped comma, plus and a leading '#'
        ([[(ORG, "Bank, Ltd.")], [(CN, "#a+b")]], "CN=\\#a\\+b,O=Bank\\, Ltd."),
        # Chinese text stays as it is
        ([[(C, "CN")], [(ORG, "中国银行")], [(CN, "张三")]], "CN=张三,O=中国银行,C=CN"),
        # control characters: C0 (BEL), DEL, C1 (NEL)
        ([[(CN, "tel\x07ler\x7f-7\x85")]], "CN=tel\\07ler\\7F-7\\C2\\85"),
        # bidi override, isolate and mark, zero-width space, no-break space
        ([[(ORG, "Bank\u202eknaB")]], "O=Bank\\E2\\80\\AEknaB"),
        ([[(CN, "a\u2066b\u2069\u200fc")]], "CN=a\\E2\\81\\A6b\\E2\\81\\A9\\E2\\80\\8Fc"),
        ([[(CN, "teller\u200b-7\u00a0")]], "CN=teller\\E2\\80\\8B-7\\C2\\A0"),
    ],
)
def test_rendering_real_certificates(rdns, expected) -> None:
    subject = cert_subject(*rdns)
    rendered = render_name(subject)
    assert rendered == expected
    assert _safe_to_display(rendered)
    assert parse_name(rendered) == subject  # the escaped form still names exactly this subject
    assert rendered in principal_candidates(rendered)


@pytest.mark.parametrize(
    "typed",
    [
        "CN=teller-7,O=Bank",  # the README's example
        "O=Bank,CN=teller-7",  # RFC 4514 order of an openssl -subj certificate
        "cn=teller-7, o=Bank",  # attribute types in any case, a space after the comma
        " CN = teller-7 , O = Bank ",  # as `openssl x509 -subject` prints it, with spaces
        "commonName=teller-7,organizationName=Bank",
        "2.5.4.3=teller-7,2.5.4.10=Bank",
    ],
)
def test_filter_spellings_match_both_certificate_orders(typed) -> None:
    candidates = principal_candidates(typed)
    assert render_name(TELLER_CA_ORDER) in candidates
    assert render_name(TELLER_OPENSSL_ORDER) in candidates


def test_filter_equivalences_that_do_not_hold() -> None:
    three = render_name(cert_subject([(C, "CN")], [(ORG, "Bank")], [(CN, "teller-7")]))
    assert three == "CN=teller-7,O=Bank,C=CN"
    assert three in principal_candidates("C=CN, O=Bank, CN=teller-7")  # reversed: yes
    assert three not in principal_candidates("O=Bank,CN=teller-7,C=CN")  # another permutation: no
    assert three not in principal_candidates("CN=teller-7,O=Bank")  # a missing RDN: no
    assert "CN=teller-7,O=Bank" not in principal_candidates("CN=Teller-7,O=Bank")  # values: exact case
    assert principal_candidates("svc-a") == ("svc-a",)  # a token principal: only itself
    assert principal_candidates("x=1;y") == ("x=1;y",)  # not a DN: only itself
    multi = render_name(cert_subject([(ORG, "Bank")], [(UID, "u-7"), (CN, "teller-7")]))
    assert multi in principal_candidates("uid=u-7+cn=teller-7, o=Bank")  # an RDN is a set


def test_control_and_bidi_characters_typed_raw_or_escaped_match_the_escaped_principal() -> None:
    stored = render_name(cert_subject([(ORG, "Bank\u202eknaB")], [(CN, "t\x01")]))
    assert stored == "CN=t\\01,O=Bank\\E2\\80\\AEknaB"
    assert stored in principal_candidates("CN=t\x01,O=Bank\u202eknaB")
    assert stored in principal_candidates("cn=t\\01, o=Bank\\e2\\80\\aeknaB")
    assert display_safe("a\u202eb\x01") == "a\\u202eb\\u0001"


_TYPES = [CN, ORG, OU, NameOID.LOCALITY_NAME, UID, NameOID.DOMAIN_COMPONENT]
_VALUES = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


@st.composite
def _names(draw) -> list[list[tuple[x509.ObjectIdentifier, str]]]:
    rdns = []
    for _ in range(draw(st.integers(1, 4))):
        types = draw(st.lists(st.sampled_from(_TYPES), min_size=1, max_size=2, unique=True))
        rdns.append([(t, draw(_VALUES)) for t in types])
    return rdns


@settings(max_examples=150, deadline=None)
@given(_names())
def test_render_parse_round_trip(rdns) -> None:
    name = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in rdn]) for rdn in rdns])
    rendered = render_name(name)
    assert _safe_to_display(rendered)
    assert parse_name(rendered) == name
    reversed_rendering = render_name(x509.Name(list(reversed(name.rdns))))
    assert rendered in principal_candidates(reversed_rendering)


async def test_store_query_matches_every_spelling(backend: Backend, key) -> None:
    log = await AuditLog.open(backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    try:
        principals = [
            render_name(TELLER_OPENSSL_ORDER),
            render_name(TELLER_CA_ORDER),
            "svc-a",
            render_name(cert_subject([(ORG, "Bank")], [(CN, "teller-8")])),
        ]
        for i, p in enumerate(principals):
            await log.append(make(i, principal=p))
        for typed in ("CN=teller-7,O=Bank", "cn=teller-7, o=Bank", "O=Bank,CN=teller-7"):
            rows = await log.query(QueryFilter(principal_any=principal_candidates(typed)))
            assert sorted(r.principal for r in rows) == sorted(principals[:2]), typed
        rows = await log.query(QueryFilter(principal_any=principal_candidates("svc-a")))
        assert [r.principal for r in rows] == ["svc-a"]
        assert await log.query(QueryFilter(principal_any=())) == []
    finally:
        await log.close()


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xinserve")
    sub = parser.add_subparsers(dest="command", required=True)
    audit.cli.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


async def test_export_cli_with_the_readme_example(sqlite_backend: Backend, key, tmp_path: Path, monkeypatch) -> None:
    june = int(datetime.datetime(2026, 6, 15, tzinfo=datetime.UTC).timestamp() * 1000)
    may = int(datetime.datetime(2026, 5, 15, tzinfo=datetime.UTC).timestamp() * 1000)
    bidi = render_name(cert_subject([(ORG, "Bank\u202eknaB")], [(CN, "teller-9")]))
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    try:
        await log.append(make(1, principal=render_name(TELLER_OPENSSL_ORDER), time_ms=june))
        await log.append(make(2, principal=render_name(TELLER_CA_ORDER), time_ms=june + 1))
        await log.append(make(3, principal=render_name(TELLER_OPENSSL_ORDER), time_ms=may))
        await log.append(make(4, principal="svc-a", time_ms=june + 2))
        await log.append(make(5, principal=bidi, time_ms=june + 3))
    finally:
        await log.close()
    store = str(sqlite_backend.path)
    monkeypatch.chdir(tmp_path)
    # README: xinserve audit export --store ... --since 2026-06-01 --until 2026-07-01 \
    #     --principal "CN=teller-7,O=Bank" -o june.jsonl
    argv = ["audit", "export", "--store", store, "--since", "2026-06-01", "--until", "2026-07-01"]
    assert _run([*argv, "--principal", "CN=teller-7,O=Bank", "-o", "june.jsonl"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "june.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(x["request_id"], x["principal"]) for x in lines] == [
        ("req-1", "O=Bank,CN=teller-7"),
        ("req-2", "CN=teller-7,O=Bank"),
    ]
    # the bidi override is stored escaped, and found by the raw character as well
    assert _run([*argv, "--principal", "CN=teller-9, O=Bank\u202eknaB", "-o", "bidi.jsonl"]) == 0
    exported = (tmp_path / "bidi.jsonl").read_text(encoding="utf-8")
    assert [json.loads(x)["principal"] for x in exported.splitlines()] == ["CN=teller-9,O=Bank\\E2\\80\\AEknaB"]
    assert "\u202e" not in exported


@pytest.mark.parametrize("nameopt", ["RFC2253", "RFC2253,-esc_msb", "oneline", None])
def test_what_openssl_prints_finds_the_certificate(tmp_path: Path, nameopt: str | None) -> None:
    """An auditor copies the subject from ``openssl x509 -subject`` (any -nameopt, incl. the
    default with its spaces, hex-escaped UTF-8 and quoted values) into --principal."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    make = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-utf8"]
    subj = "/C=CN/O=中国银行/OU=a, b/CN=teller-7"
    subprocess.run(
        [*make, "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", subj], check=True, capture_output=True
    )
    stored = render_name(x509.load_pem_x509_certificate(cert.read_bytes()).subject)
    assert stored == "CN=teller-7,OU=a\\, b,O=中国银行,C=CN"
    show = [openssl, "x509", "-in", str(cert), "-noout", "-subject", *(["-nameopt", nameopt] if nameopt else [])]
    printed = subprocess.run(show, check=True, capture_output=True, text=True).stdout.strip()
    assert printed.startswith("subject=")
    assert stored in principal_candidates(printed.removeprefix("subject=").strip())
