"""Webhooks: events emitted once per state change (outbox.py), signed as Standard
Webhooks (signing.py), sent to checked addresses only (ssrf.py) with retries (delivery.py), every
attempt logged (deliveries.py); per-key signing secrets (secrets.py)."""
