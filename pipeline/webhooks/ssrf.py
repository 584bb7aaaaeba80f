"""Webhook URLs must not reach inside our network (server-side request forgery).

``validate_webhook_url()`` parses the URL, resolves its host (every address) and refuses it unless
every address is globally reachable (``refusal()``: ``ipaddress``'s ``is_global``, with the
registry entries below). An operator allow-list (``webhook_allow_hosts``: host names or CIDRs) lets
chosen internal receivers through. It runs when a URL is submitted and again before each delivery
attempt (DNS may have changed); the delivery then connects to the very address that was checked
(see delivery.py), so a rebinding DNS server cannot swap it in between.

A refusal tells the client only that the host must resolve to public addresses, the same words
whether the name resolved to an internal address or did not resolve at all: what an internal name
resolves to, or whether it exists, is the operator's to know (it is logged), not the caller's.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pipeline.errors import InputError

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # embeds an IPv4 address in its low 32 bits
# IANA hands out global unicast IPv6 from 2000::/3 only (IPv6 Address Space registry). Outside it
# nothing is reachable on the Internet, whatever ``is_global`` says (it calls the deprecated
# site-local fec0::/10 global, for one).
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
# IANA's special-purpose registries mark these not globally reachable; Python's tables gained them
# in later patch releases, and the API may run on an older one. 192.0.0.0/24 is refused whole:
# its two exceptions that IANA (and a current Python) call globally reachable, 192.0.0.9 (PCP
# anycast) and 192.0.0.10 (TURN anycast), are services answered by the nearest server, which is
# the network's own; so is the deprecated 6to4 relay anycast 192.88.99.0/24 (IANA: "N/A").
_NOT_GLOBAL = (
    ipaddress.ip_network("192.0.0.0/24"),
    ipaddress.ip_network("192.88.99.0/24"),
    ipaddress.ip_network("64:ff9b:1::/48"),
    ipaddress.ip_network("3fff::/20"),
)
MAX_URL_CHARS = 2000
PORTS = range(1, 65536)
PUBLIC_ONLY = "must resolve to public addresses only"


class WebhookURLError(InputError):
    """A webhook URL that synth refuses to call; the message says why (an API answers 400).
    ``reason``: the whole story, which may name internal addresses (for logs, never for a client)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


@dataclass(frozen=True)
class WebhookTarget:
    """A checked URL and the addresses it resolved to, all of them allowed."""

    url: str
    scheme: str
    host: str  # as written (lower case), for the Host header and TLS SNI
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
    """Why this address may not be called (for the operator's log), or None if it is globally
    reachable. An IPv6 form that carries an IPv4 address (mapped, 6to4, NAT64, Teredo) is judged by
    the IPv4 address it reaches."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = (
            address.ipv4_mapped
            or address.sixtofour
            or (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None)
        )
        if address.teredo:
            embedded = address.teredo[1]
        if embedded is not None:
            inner = refusal(embedded)
            return f"{inner} (inside IPv6 {address})" if inner else None
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    v6_unicast = address.version == 4 or address in _GLOBAL_UNICAST_V6
    if address.is_global and v6_unicast and not address.is_multicast and not any(address in n for n in _NOT_GLOBAL):
        return None
    kinds = (
        ("an unspecified", address.is_unspecified),
        ("a loopback", address.is_loopback),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        ("a site-local", address.version == 6 and address.is_site_local),
        ("a reserved", address.is_reserved),
        ("a private", address.is_private),
    )
    return next((f"{kind} address" for kind, hit in kinds if hit), "not globally reachable")


def resolve(host: str, port: int) -> tuple[IPAddress, ...]:
    """Every address the host resolves to (a literal IP resolves to itself without DNS)."""
    try:
        return (ipaddress.ip_address(host),)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise refused(host, f"does not resolve: {e}") from e
    seen: dict[IPAddress, None] = {}
    for *_, sockaddr in infos:
        seen.setdefault(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]), None)  # an IP address
    if not seen:
        raise refused(host, "resolves to no address")
    return tuple(seen)


def refused(host: str, reason: str) -> WebhookURLError:
    """The refusal of a host that is not (only) public. The caller is told the rule, never what
    the host resolved to nor whether it resolved: the reason goes to the log."""
    log.info("webhook host %r refused: %s", host, reason)
    return WebhookURLError(
        f"webhook URL host {host!r} {PUBLIC_ONLY}; an operator can allow internal "
        f"receivers with SYNTH_WEBHOOK_ALLOW_HOSTS",
        reason,
    )


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
    if port is not None and port not in PORTS:  # urlsplit lets 0 through; nothing listens there
        raise WebhookURLError(f"webhook URL port must be {PORTS.start} to {PORTS.stop - 1}, not {port}")
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
        raise refused(host, "a cloud metadata service name")
    addresses = resolve(host, port)
    for address in addresses:
        why = refusal(address)
        if why and not allow.allows(address):
            raise refused(host, f"{address} is {why}")
    return WebhookTarget(url, scheme, host, port, addresses)
