"""What the operator's console (/dashboard) shows, read from the database and Redis: batches in
progress and the latest failures (progress.py), the last 24 hours as time-bucketed aggregates
(series.py), and the queue depths sampled each minute (depths.py). Plain data; api/ renders it."""
