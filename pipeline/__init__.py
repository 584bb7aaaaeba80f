"""synth's product: text, engines, batching, audio, storage, database, reports.

Nothing here imports ``worker`` or ``api``.
"""
