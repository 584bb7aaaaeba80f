"""Pronunciation lexicons: an API key's written forms and what is said for them.

- entries.py: one entry (a word or a pattern, said as other words or as phonemes) and its limits;
- apply.py: a lexicon version compiled for the text front end, applied in one pass over a text;
- formats.py: W3C PLS files and the ``word = says`` text form, in and out;
- store.py: lexicons and their versions in the database, scoped to their owner.
"""
