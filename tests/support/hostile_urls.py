"""The hostile webhook URLs of docs/reliability.md ("Hostile input"), shared by the unit and
security tests.

Each entry is ``(url, what it tries)``. Every one of them must be refused by the destination guard
under the default policy (https required, nothing allowed), and every one that names an address
must still be refused with plain http allowed (``LOOPBACK_SPELLINGS`` and ``INTERNAL_LITERALS``).
"""

from __future__ import annotations

#: 127.0.0.1 (or ::1) written every way a parser may read it.
LOOPBACK_SPELLINGS: tuple[tuple[str, str], ...] = (
    ("http://127.0.0.1/", "dotted quad"),
    ("http://127.1/", "short form"),
    ("http://127.0.1/", "three parts"),
    ("http://2130706433/", "decimal"),
    ("http://0x7f.1/", "hex first part"),
    ("http://0x7f000001/", "hex"),
    ("http://0X7F.0.0.1/", "upper-case hex"),
    ("http://0177.0.0.1/", "octal"),
    ("http://017700000001/", "octal whole"),
    ("http://127.0.0.1./", "trailing dot"),
    ("http://127.255.255.254/", "elsewhere in 127/8"),
    ("http://[::1]/", "IPv6 loopback"),
    ("http://[0:0:0:0:0:0:0:1]/", "IPv6 loopback, long"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped"),
    ("http://[::ffff:7f00:1]/", "IPv4-mapped, hex"),
    ("http://[::ffff:0:7f00:1]/", "IPv4-translated"),
    ("http://[::127.0.0.1]/", "IPv4-compatible"),
    ("http://[64:ff9b::7f00:1]/", "NAT64"),
    ("http://[64:ff9b::127.0.0.1]/", "NAT64, dotted"),
    ("http://[2002:7f00:1::]/", "6to4"),
    ("http://[2002:7f00:0001:0:0:0:0:1]/", "6to4, long"),
)

#: Other internal ranges, as literals.
INTERNAL_LITERALS: tuple[tuple[str, str], ...] = (
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://[::ffff:169.254.169.254]/", "cloud metadata, IPv4-mapped"),
    ("http://[fd00:ec2::254]/", "cloud metadata, IPv6 (unique-local)"),
    ("http://2852039166/", "cloud metadata, decimal"),
    ("http://10.0.0.1/", "private 10/8"),
    ("http://172.16.5.4/", "private 172.16/12"),
    ("http://192.168.1.1/", "private 192.168/16"),
    ("http://0xc0.0xa8.1.1/", "private, hex parts"),
    ("http://100.64.0.1/", "CGNAT"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified, one part"),
    ("http://[::]/", "IPv6 unspecified"),
    ("http://255.255.255.255/", "broadcast"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "IPv6 multicast"),
    ("http://240.0.0.1/", "reserved class E"),
    ("http://[fe80::1]/", "IPv6 link-local"),
    ("http://[fc00::1]/", "unique-local"),
    ("http://[fec0::1]/", "site-local"),
    ("http://192.0.2.1/", "documentation"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://[2001:db8::1]/", "IPv6 documentation"),
    ("http://[2001::1]/", "Teredo"),
    ("http://[64:ff9b::a00:1]/", "NAT64 of a private address"),
    ("http://[2002:a9fe:a9fe::]/", "6to4 of the metadata address"),
)

#: URLs refused for their form, whatever the host resolves to.
BAD_FORMS: tuple[tuple[str, str], ...] = (
    ("https://user@example.com/", "userinfo"),
    ("https://user:pw@example.com/", "userinfo with password"),
    ("https://example.com@127.0.0.1/", "userinfo trick: the host is 127.0.0.1"),
    ("https://good.example@127.0.0.1/", "userinfo trick"),
    ("https://127.0.0.1@good.example/", "userinfo trick, reversed"),
    ("https://good.example%40127.0.0.1/", "percent-encoded '@'"),
    ("https://good.example\\@127.0.0.1/", "backslash"),
    ("https://good.example\t.com/", "tab in the host"),
    ("https://good .example/", "space in the host"),
    ("https://good.example\r\nHost: x/", "CR/LF"),
    ("https://exa\x00mple.com/", "NUL"),
    ("https://exämple.com/", "raw IDN"),
    ("ftp://example.com/", "ftp scheme"),
    ("file:///etc/passwd", "file scheme"),
    ("gopher://127.0.0.1:6379/_", "gopher scheme"),
    ("javascript:alert(1)", "javascript scheme"),
    ("//example.com/", "scheme-relative"),
    ("https:example.com", "no //"),
    ("https:///path", "no host"),
    ("https://:443/", "empty host"),
    ("https://example.com:0/", "port 0"),
    ("https://example.com:65536/", "port out of range"),
    ("https://example.com:-1/", "negative port"),
    ("https://example.com:\uff18\uff10/", "full-width port digits"),
    ("https://example.com:/", "empty port"),
    ("https://[::1/", "unclosed bracket"),
    ("https://[fe80::1%25eth0]/", "zone id"),
    ("https://[127.0.0.1]/", "IPv4 in brackets"),
    ("https://[::1]evil.example/", "text after the IPv6 literal"),
    ("https://99999999999999999999/", "a huge number"),
    ("https://1.2.3.4.5/", "five numeric parts"),
    ("https://example.123/", "numeric last label"),
    ("https://256.256.256.256/", "octets out of range"),
    ("https://0x/", "empty hex"),
    ("https://08.0.0.1/", "bad octal"),
    ("https://127.0.0.%31/", "percent-encoded host"),
    ("https://-bad-.example/", "bad label"),
)

#: Everything above: refused under the default policy (https required, nothing allowed).
HOSTILE_URLS: tuple[tuple[str, str], ...] = LOOPBACK_SPELLINGS + INTERNAL_LITERALS + BAD_FORMS
