"""Plain-integer arithmetic on SM2 curves (GB/T 32918.5 recommended curve ``sm2p256v1``).

Used for public-key validation (on-curve checks), deriving a public key from a loaded private key,
and — in the tests — as an implementation of the standard's equations that is independent of the
signing library. Not constant-time: never use it to sign production data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Curve:
    p: int
    a: int
    b: int
    gx: int
    gy: int
    n: int

    def on_curve(self, x: int, y: int) -> bool:
        """True when (x, y) is a finite point of the curve with canonical coordinates."""
        if not (0 <= x < self.p and 0 <= y < self.p):
            return False
        return (y * y - (x * x * x + self.a * x + self.b)) % self.p == 0

    # Jacobian coordinates (X, Y, Z); Z == 0 is the point at infinity.
    def _double(self, pt: tuple[int, int, int]) -> tuple[int, int, int]:
        x, y, z = pt
        p = self.p
        if z == 0 or y == 0:
            return (1, 1, 0)
        yy = y * y % p
        s = 4 * x * yy % p
        zz = z * z % p
        m = (3 * x * x + self.a * zz * zz) % p
        x3 = (m * m - 2 * s) % p
        y3 = (m * (s - x3) - 8 * yy * yy) % p
        z3 = 2 * y * z % p
        return (x3, y3, z3)

    def _add(self, p1: tuple[int, int, int], p2: tuple[int, int, int]) -> tuple[int, int, int]:
        x1, y1, z1 = p1
        x2, y2, z2 = p2
        p = self.p
        if z1 == 0:
            return p2
        if z2 == 0:
            return p1
        z1z1 = z1 * z1 % p
        z2z2 = z2 * z2 % p
        u1 = x1 * z2z2 % p
        u2 = x2 * z1z1 % p
        s1 = y1 * z2 * z2z2 % p
        s2 = y2 * z1 * z1z1 % p
        if u1 == u2:
            if s1 != s2:
                return (1, 1, 0)
            return self._double(p1)
        h = (u2 - u1) % p
        r = (s2 - s1) % p
        hh = h * h % p
        hhh = h * hh % p
        v = u1 * hh % p
        x3 = (r * r - hhh - 2 * v) % p
        y3 = (r * (v - x3) - s1 * hhh) % p
        z3 = h * z1 * z2 % p
        return (x3, y3, z3)

    def _affine(self, pt: tuple[int, int, int]) -> tuple[int, int] | None:
        x, y, z = pt
        if z == 0:
            return None
        zi = pow(z, -1, self.p)
        zi2 = zi * zi % self.p
        return (x * zi2 % self.p, y * zi2 * zi % self.p)

    def mul(self, k: int, point: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """k·P (P defaults to the base point G); None is the point at infinity."""
        px, py = (self.gx, self.gy) if point is None else point
        acc = (1, 1, 0)
        base = (px, py, 1)
        for bit in bin(k)[2:]:
            acc = self._double(acc)
            if bit == "1":
                acc = self._add(acc, base)
        return self._affine(acc)

    def add(self, p1: tuple[int, int] | None, p2: tuple[int, int] | None) -> tuple[int, int] | None:
        j1 = (1, 1, 0) if p1 is None else (p1[0], p1[1], 1)
        j2 = (1, 1, 0) if p2 is None else (p2[0], p2[1], 1)
        return self._affine(self._add(j1, j2))


SM2P256V1 = Curve(
    p=0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFF,
    a=0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFC,
    b=0x28E9FA9E9D9F5E344D5A9E4BCF6509A7F39789F515AB8F92DDBCBD414D940E93,
    gx=0x32C4AE2C1F1981195F9904466A39C9948FE30BBFF2660BE1715A4589334C74C7,
    gy=0xBC3736A2F4F6779C59BDCEE36B692153D0A9877CC62A474002DF32E52139F0A0,
    n=0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFF7203DF6B21C6052B53BBF40939D54123,
)
