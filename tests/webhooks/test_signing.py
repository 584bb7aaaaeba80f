"""Standard Webhooks signing: the spec's published vector, verification, tolerance, rotation."""

import pytest

from pipeline.webhooks import signing
from pipeline.webhooks.signing import WebhookVerificationError, headers, new_secret, sign, verify

# From the Standard Webhooks reference libraries' tests (libraries/*/tests, "test_sign_function").
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = '{"test": 2432232314}'
VECTOR_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_sign_matches_the_published_vector():
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TS, VECTOR_BODY) == VECTOR_SIG
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TS, VECTOR_BODY.encode()) == VECTOR_SIG
    # The secret without its prefix is the same key.
    assert sign(VECTOR_SECRET.removeprefix("whsec_"), VECTOR_ID, VECTOR_TS, VECTOR_BODY) == VECTOR_SIG


def vector_headers(sig=VECTOR_SIG):
    return {"webhook-id": VECTOR_ID, "webhook-timestamp": str(VECTOR_TS), "webhook-signature": sig}


def test_verify_accepts_the_vector_within_tolerance_and_any_header_case():
    verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_TS + 299)
    verify(VECTOR_SECRET, {k.title(): v for k, v in vector_headers().items()}, VECTOR_BODY, now=VECTOR_TS)


@pytest.mark.parametrize("now", [VECTOR_TS + 301, VECTOR_TS - 301])
def test_verify_refuses_stale_or_future_timestamps(now):
    with pytest.raises(WebhookVerificationError, match="more than 300 s"):
        verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=now)


def test_verify_refuses_tampering_and_missing_headers():
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY.replace("2", "3"), now=VECTOR_TS)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify(new_secret(), vector_headers(), VECTOR_BODY, now=VECTOR_TS)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):  # the spec's invalid one
        verify(
            VECTOR_SECRET, vector_headers("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="), VECTOR_BODY, now=VECTOR_TS
        )
    with pytest.raises(WebhookVerificationError, match="no signature matches"):  # right MAC, wrong version
        verify(VECTOR_SECRET, vector_headers("v2," + VECTOR_SIG[3:]), VECTOR_BODY, now=VECTOR_TS)
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        h = vector_headers()
        del h[name]
        with pytest.raises(WebhookVerificationError, match=f"missing header {name}"):
            verify(VECTOR_SECRET, h, VECTOR_BODY, now=VECTOR_TS)
    with pytest.raises(WebhookVerificationError, match="not an integer"):
        verify(VECTOR_SECRET, {**vector_headers(), "webhook-timestamp": "hello"}, VECTOR_BODY, now=VECTOR_TS)


def test_one_valid_signature_among_several_is_enough():
    other = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    verify(VECTOR_SECRET, vector_headers(f"{other} v2,xyz {VECTOR_SIG} {other}"), VECTOR_BODY, now=VECTOR_TS)


def test_headers_sign_with_every_secret_so_old_and_new_both_verify():
    old, new = new_secret(), new_secret()
    h = headers("msg_abc", b'{"a":1}', [new, old])
    assert h["webhook-id"] == "msg_abc" and len(h["webhook-signature"].split()) == 2
    verify(new, h, b'{"a":1}')
    verify(old, h, b'{"a":1}')


def test_new_secrets_are_prefixed_random_and_32_bytes():
    import base64

    a, b = new_secret(), new_secret()
    assert a != b and a.startswith("whsec_")
    assert len(base64.b64decode(a.removeprefix("whsec_"))) == signing.SECRET_BYTES


def test_ids_with_dots_are_refused():
    with pytest.raises(ValueError, match="must not contain"):
        sign(VECTOR_SECRET, "msg.1", VECTOR_TS, "{}")
