"""Ed25519 as RFC 8032 specifies it (section 5.1, pure Python, slow): an implementation
independent of OpenSSL, to check what the sender signs through ``cryptography``.

Straight from the RFC's equations on the twisted Edwards curve in extended coordinates; nothing
here is constant time, so it is for tests only. :class:`ReferenceEd25519` is the
:class:`~outbox_core.ports.Ed25519` port on it (the core's unit tests run on it, without the
``crypto`` extra). tests/unit/test_signing_v1a.py checks it against RFC 8032's test vector 1.
"""

from __future__ import annotations

import hashlib
from typing import Final

P: Final = 2**255 - 19
Q: Final = 2**252 + 27742317777372353535851937790883648493  # the group order (RFC 8032: L)
D: Final = -121665 * pow(121666, P - 2, P) % P
_SQRT_M1: Final = pow(2, (P - 1) // 4, P)

Point = tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z


def _inv(x: int) -> int:
    return pow(x, P - 2, P)


def _add(a: Point, b: Point) -> Point:
    e1 = (a[1] - a[0]) * (b[1] - b[0]) % P
    h1 = (a[1] + a[0]) * (b[1] + b[0]) % P
    c = 2 * a[3] * b[3] * D % P
    dd = 2 * a[2] * b[2] % P
    e, f, g, h = h1 - e1, dd - c, dd + c, h1 + e1
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(scalar: int, point: Point) -> Point:
    result: Point = (0, 1, 1, 0)
    while scalar > 0:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _equal(a: Point, b: Point) -> bool:
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def _recover_x(y: int, sign: int) -> int | None:
    if y >= P:
        return None
    x2 = (y * y - 1) * _inv(D * y * y + 1) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * _SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


_GY: Final = 4 * _inv(5) % P
_GX: Final = _recover_x(_GY, 0) or 0
G: Final[Point] = (_GX, _GY, 1, _GX * _GY % P)


def _compress(point: Point) -> bytes:
    z = _inv(point[2])
    x, y = point[0] * z % P, point[1] * z % P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _decompress(data: bytes) -> Point | None:
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


def _expand(private_key: bytes) -> tuple[int, bytes]:
    if len(private_key) != 32:
        raise ValueError("an Ed25519 private key is 32 bytes")
    digest = hashlib.sha512(private_key).digest()
    a = int.from_bytes(digest[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, digest[32:]


def _h(data: bytes) -> int:
    return int.from_bytes(hashlib.sha512(data).digest(), "little") % Q


def public_key(private_key: bytes) -> bytes:
    a, _ = _expand(private_key)
    return _compress(_mul(a, G))


def sign(private_key: bytes, message: bytes) -> bytes:
    a, prefix = _expand(private_key)
    public = _compress(_mul(a, G))
    r = _h(prefix + message)
    encoded_r = _compress(_mul(r, G))
    s = (r + _h(encoded_r + public + message) * a) % Q
    return encoded_r + int.to_bytes(s, 32, "little")


def verify(public: bytes, signature: bytes, message: bytes) -> bool:
    if len(public) != 32 or len(signature) != 64:
        return False
    a_point = _decompress(public)
    r_point = _decompress(signature[:32])
    if a_point is None or r_point is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= Q:
        return False
    h = _h(signature[:32] + public + message)
    return _equal(_mul(s, G), _add(r_point, _mul(h, a_point)))


class ReferenceEd25519:
    """The :class:`~outbox_core.ports.Ed25519` port on this module."""

    def public_key(self, private_key: bytes) -> bytes:
        return public_key(private_key)

    def sign(self, private_key: bytes, message: bytes) -> bytes:
        return sign(private_key, message)

    def verify(self, public_key: bytes, signature: bytes, message: bytes) -> bool:
        return verify(public_key, signature, message)
