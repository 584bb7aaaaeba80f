"""Serving: the continuous-batching engine around the model.

scheduler (which sequences hold a cache row, are prefilled and decode this step; no torch), runner
(a plan into device work: prefill, the decode step, the rows' state), graphs (the CUDA graphs of
the prefill), loop (the thread that steps them and feeds the codec), stats (what the loop measures,
kept by an observer beside it).
"""
