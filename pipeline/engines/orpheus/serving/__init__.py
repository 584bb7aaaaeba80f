"""Serving: the continuous-batching engine around the model.

admission (which sequences wait and which hold a cache row) and scheduler (which are prefilled and
decode this step; no torch in either), runner (a plan into device work: prefill, the decode step,
the rows' state), graphs (the CUDA graphs of the prefill), loop (the thread that steps them and
feeds the codec), stats (what the loop measures, kept by an observer beside it).
"""
