"""Routers, by module name under api/routes; each module exposes ``router``. create_app includes
them in this order."""

ROUTERS = [
    "health",
    "meta",
    "batches",
    "documents",
    "jobs",
    "speech",
    "usage",
    "dashboard",
    "webhooks",
    "lexicons",
    "options",
]
