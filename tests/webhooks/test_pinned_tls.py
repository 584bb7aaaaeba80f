"""https webhooks go to the checked IP while TLS still verifies the URL's host name (SNI and
certificate), so pinning the address does not weaken certificate checks. A real TLS server on a
loopback port with a certificate for "localhost" only, from a CA made here (cryptography, no files
downloaded)."""

import datetime
import ipaddress
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from pipeline.webhooks.delivery import post_pinned
from pipeline.webhooks.ssrf import WebhookTarget

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def _cert(subject, issuer, key, issuer_key, *, ca, san=None):
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def tls_server(tmp_path):
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "synth test CA")])
    ca = _cert(ca_name, ca_name, ca_key, ca_key, ca=True)
    leaf = _cert(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
        ca_name,
        key,
        ca_key,
        ca=False,
        san="localhost",
    )
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append((self.headers["host"], self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trust = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    yield server.server_address[1], trust, seen
    server.shutdown()
    server.server_close()


def test_https_is_pinned_to_the_checked_ip_and_verified_against_the_host_name(tls_server):
    port, trust, seen = tls_server
    loopback = ipaddress.ip_address("127.0.0.1")
    good = WebhookTarget(f"https://localhost:{port}/hook?a=1", "https", "localhost", port, (loopback,))
    assert post_pinned(good, loopback, b"{}", {}, timeout=5, verify=trust) == 204
    assert seen == [(f"localhost:{port}", b"{}")]
    # The same address under a name the certificate does not carry: refused by TLS.
    wrong = WebhookTarget(f"https://other.example:{port}/hook", "https", "other.example", port, (loopback,))
    with pytest.raises(httpx.ConnectError, match="(?i)certificate|hostname"):
        post_pinned(wrong, loopback, b"{}", {}, timeout=5, verify=trust)
    assert len(seen) == 1
