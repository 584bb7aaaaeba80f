"""Celery: the app, queues and routing, thin tasks, engine boot and GPU pinning."""
