"""The SSRF guard on webhook URLs: literal addresses and localhost only (no external DNS)."""

import ipaddress
import re

import pytest

from pipeline.webhooks.ssrf import AllowList, WebhookURLError, refusal, validate_webhook_url

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"


# reason: a regular expression the refusal's logged reason matches
@pytest.mark.parametrize(
    "url, reason",
    [
        ("http://127.0.0.1/hook", "loopback"),
        ("http://127.8.9.10:8080/", "loopback"),
        ("http://localhost:9000/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://10.1.2.3/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd12:3456::1]/", "private"),
        ("http://169.254.10.10/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://240.0.0.1/", "reserved"),
        ("http://100.64.0.1/", "not globally reachable"),  # shared address space (CGNAT)
        ("http://[fec0::1]/", "site-local"),  # deprecated, outside global unicast
        ("http://[5f00::1]/", "reserved"),  # SRv6 SIDs
        ("http://[2001:db8::1]/", "private"),  # documentation
        ("http://[3fff::1]/", "private|not globally"),  # documentation (RFC 9637)
        ("http://192.0.0.192/", "private|not globally"),  # IETF protocol assignments
        ("http://192.0.0.9/", "private|not globally"),  # PCP anycast: the nearest server is ours
        ("http://192.0.0.10/", "private|not globally"),  # TURN anycast, likewise
        ("http://192.88.99.1/", "private|not globally"),  # 6to4 relay anycast (deprecated), likewise
        ("http://198.18.0.1/", "private"),  # benchmarking
        ("http://[64:ff9b:1::a00:1]/", "reserved|not globally"),  # local-use NAT64
        ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped IPv6
        ("http://[::ffff:169.254.169.254]/", "cloud metadata"),
        ("http://[64:ff9b::a00:1]/", "private"),  # NAT64 of 10.0.0.1
        ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 of 127.0.0.1
        ("http://2130706433/", "loopback"),  # 127.0.0.1 as one decimal number
    ],
)
def test_internal_addresses_are_refused_without_saying_which_they_are(url, reason):
    with pytest.raises(WebhookURLError, match="must resolve to public addresses only") as refused:
        validate_webhook_url(url)
    # which kind of address: the log's story (Python's releases name a few differently), not the client's
    assert re.search(reason, refused.value.reason) and not re.search(reason, str(refused.value))


@pytest.mark.parametrize(
    "url, reason",
    [
        ("ftp://example.com/x", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "http or https"),
        ("example.com/hook", "http or https"),
        (f"http://user:pw@{PUBLIC_V4}/", "credentials"),
        (f"https://token@{PUBLIC_V4}/", "credentials"),
        ("http:///nohost", "no host"),
        (f"http://{PUBLIC_V4}:99999/", "malformed"),
        ("https://" + "a" * 2001, "at most 2000"),
    ],
)
def test_malformed_urls_are_refused(url, reason):
    with pytest.raises(WebhookURLError, match=reason):
        validate_webhook_url(url)


def test_public_literal_addresses_pass_with_their_port():
    t = validate_webhook_url(f"https://{PUBLIC_V4}/hooks?x=1")
    assert (t.scheme, t.host, t.port, t.addresses) == ("https", PUBLIC_V4, 443, (ipaddress.ip_address(PUBLIC_V4),))
    t6 = validate_webhook_url(f"http://[{PUBLIC_V6}]:8080/")
    assert t6.port == 8080 and t6.addresses == (ipaddress.ip_address(PUBLIC_V6),)


def test_allow_list_by_host_and_by_cidr():
    assert validate_webhook_url("http://localhost:9000/", ["localhost"]).addresses
    assert validate_webhook_url("http://127.0.0.1:9000/", ["127.0.0.0/8"]).host == "127.0.0.1"
    assert validate_webhook_url("http://[::1]:9000/", AllowList.parse(["::1/128"])).port == 9000
    with pytest.raises(WebhookURLError, match="public addresses only"):  # a CIDR allows only what it holds
        validate_webhook_url("http://10.0.0.1/", ["127.0.0.0/8"])
    with pytest.raises(WebhookURLError, match="SYNTH_WEBHOOK_ALLOW_HOSTS"):
        validate_webhook_url("http://127.0.0.1/", ["otherhost"])


def test_a_name_that_resolves_inside_and_one_that_does_not_resolve_get_the_same_answer():
    # "localhost" resolves through the system resolver (/etc/hosts): the check is on addresses.
    with pytest.raises(WebhookURLError) as inside:
        validate_webhook_url("http://localhost/")
    with pytest.raises(WebhookURLError) as nowhere:
        validate_webhook_url("http://no-such-host.invalid/")
    assert re.match(r"(127\.0\.0\.1|::1) is a loopback", inside.value.reason)
    assert "does not resolve" in nowhere.value.reason
    said = [
        str(e.value).replace(host, "HOST") for e, host in ((inside, "localhost"), (nowhere, "no-such-host.invalid"))
    ]
    assert said[0] == said[1] and "127.0.0.1" not in said[0] and "::1" not in said[0], said


@pytest.mark.parametrize("url", [f"http://{PUBLIC_V4}:0/", f"https://[{PUBLIC_V6}]:0/hook"])
def test_port_zero_is_refused(url):
    with pytest.raises(WebhookURLError, match="port must be 1 to 65535, not 0"):
        validate_webhook_url(url)


def test_refusal_names_public_addresses_fine():
    assert refusal(ipaddress.ip_address(PUBLIC_V4)) is None
    assert refusal(ipaddress.ip_address(PUBLIC_V6)) is None
    assert refusal(ipaddress.ip_address("::ffff:" + PUBLIC_V4)) is None
