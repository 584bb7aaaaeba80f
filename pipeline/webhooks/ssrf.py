"""Webhook URLs must not reach inside our network (server-side request forgery).

``validate_webhook_url()`` parses the URL, resolves its host (every address) and refuses any
address that is not a public unicast one: loopback, private, link-local, shared (CGNAT), multicast,
reserved, unspecified, cloud metadata (169.254.169.254, fd00:ec2::254, metadata.google.internal),
IPv4-mapped or -translated IPv6 forms of those. An operator allow-list (``webhook_allow_hosts``:
host names or CIDRs) lets chosen internal receivers through. It runs when a URL is submitted and
again before each delivery attempt (DNS may have changed); the delivery then connects to the very
address that was checked (see delivery.py), so a rebinding DNS server cannot swap it in between.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pipeline.errors import InputError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
_SHARED = ipaddress.ip_network("100.64.0.0/10")       # carrier-grade NAT: not private, not public
_NAT64 = ipaddress.ip_network("64:ff9b::/96")         # embeds an IPv4 address in its low 32 bits
MAX_URL_CHARS = 2000


class WebhookURLError(InputError):
    """A webhook URL that synth refuses to call; the message says why (an API answers 400)."""


@dataclass(frozen=True)
class WebhookTarget:
    """A checked URL and the addresses it resolved to, all of them allowed."""

    url: str
    scheme: str
    host: str              # as written (lower case), for the Host header and TLS SNI
    port: int
    addresses: tuple[IPAddress, ...]


@dataclass(frozen=True)
class AllowList:
    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        hosts, networks = set(), []
        for entry in entries:
            entry = entry.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def allows(self, address: IPAddress) -> bool:
        return any(address in net for net in self.networks)


def refusal(address: IPAddress) -> str | None:
    """Why this address may not be called, or None if it is a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (
            ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None)
        if address.teredo:
            embedded = address.teredo[1]
        if embedded is not None:
            inner = refusal(embedded)
            return f"{inner} (inside IPv6 {address})" if inner else None
    checks = (
        (address in METADATA_ADDRESSES, "a cloud metadata address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "a shared (CGNAT) address"),
        (address.is_private, "a private address"),
        (not address.is_global, "not a public address"),
    )
    return next((why for hit, why in checks if hit), None)


def resolve(host: str, port: int) -> tuple[IPAddress, ...]:
    """Every address the host resolves to (a literal IP resolves to itself without DNS)."""
    try:
        return (ipaddress.ip_address(host),)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise WebhookURLError(f"webhook host {host!r} does not resolve: {e}") from e
    seen: dict[IPAddress, None] = {}
    for *_, sockaddr in infos:
        seen.setdefault(ipaddress.ip_address(sockaddr[0].split("%", 1)[0]), None)
    if not seen:
        raise WebhookURLError(f"webhook host {host!r} resolves to no address")
    return tuple(seen)


def parse_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL without credentials; raises WebhookURLError."""
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        raise WebhookURLError(f"webhook URL must be a string of at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as e:
        raise WebhookURLError(f"webhook URL is malformed: {e}") from e
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise WebhookURLError(f"webhook URL must be http or https, not {scheme or 'nothing'!r}")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookURLError("webhook URL must not carry credentials (user:password@)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise WebhookURLError("webhook URL has no host")
    return scheme, host, port or (443 if scheme == "https" else 80)


def validate_webhook_url(url: str, allow: AllowList | Iterable[str] = ()) -> WebhookTarget:
    """Check a webhook URL; return it with its resolved addresses, or raise WebhookURLError.

    ``allow`` is the operator's allow-list (``Settings.webhook_allow_hosts``): a host name listed
    there passes whatever it resolves to; an address inside a listed CIDR passes.
    """
    allow = allow if isinstance(allow, AllowList) else AllowList.parse(allow)
    scheme, host, port = parse_url(url)
    if host in allow.hosts:
        return WebhookTarget(url, scheme, host, port, resolve(host, port))
    if host in METADATA_HOSTS:
        raise WebhookURLError(f"webhook host {host!r} is a cloud metadata service")
    addresses = resolve(host, port)
    for address in addresses:
        why = refusal(address)
        if why and not allow.allows(address):
            shown = host if str(address) == host else f"{host} ({address})"
            raise WebhookURLError(f"webhook URL {shown} is {why}; an operator can allow it with "
                                   f"SYNTH_WEBHOOK_ALLOW_HOSTS")
    return WebhookTarget(url, scheme, host, port, addresses)
