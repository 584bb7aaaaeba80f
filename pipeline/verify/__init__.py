"""Checking audio against its text: a verdict (clean, suspect, bad or not checked) with its
scores, and the time of every word (pipeline/verify/verdict.py, recognizer.py, captions.py)."""
