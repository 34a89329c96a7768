"""An independent implementation of the GB/T 32918.2 signing equations, for the tests only.

gmssl-pyx draws k itself and cannot sign with the standard's fixed k, so the published examples are
checked here with plain Python integers (trust._curve point arithmetic, SM3 from cryptography), and
the library is cross-checked against this implementation in both directions.
"""

from __future__ import annotations

from trust._curve import Curve
from trust.sm3 import sm3


def _b(v: int) -> bytes:
    return v.to_bytes(32, "big")


def z_value(curve: Curve, uid: bytes, px: int, py: int) -> bytes:
    entl = (len(uid) * 8).to_bytes(2, "big")
    return sm3(entl + uid + _b(curve.a) + _b(curve.b) + _b(curve.gx) + _b(curve.gy) + _b(px) + _b(py))


def sign(curve: Curve, d: int, uid: bytes, msg: bytes, k: int) -> tuple[int, int]:
    pub = curve.mul(d)
    assert pub is not None
    e = int.from_bytes(sm3(z_value(curve, uid, *pub) + msg), "big")
    pt = curve.mul(k)
    assert pt is not None
    r = (e + pt[0]) % curve.n
    assert r != 0 and r + k != curve.n
    s = pow(1 + d, -1, curve.n) * (k - r * d) % curve.n
    assert s != 0
    return r, s


def verify(curve: Curve, pub: tuple[int, int], uid: bytes, msg: bytes, r: int, s: int) -> bool:
    n = curve.n
    if not (1 <= r < n and 1 <= s < n):
        return False
    t = (r + s) % n
    if t == 0:
        return False
    e = int.from_bytes(sm3(z_value(curve, uid, *pub) + msg), "big")
    pt = curve.add(curve.mul(s), curve.mul(t, pub))
    return pt is not None and (e + pt[0]) % n == r
