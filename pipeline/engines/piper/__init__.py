"""Piper (VITS, ONNX) on the CPU. piper-tts is GPL-3.0: this engine is the optional extra synth[piper]."""
