"""The REST job API (FastAPI). It imports pipeline/ and worker/ (to enqueue), never the reverse."""
