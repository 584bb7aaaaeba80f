"""The SNAC codec: LM tokens into frames, frames into audio.

codes (tokens -> frames of codec levels, validated), snac (the codec with keyed noise, batched
window decoding), graphs (its CUDA graphs), streaming (the chunk grid and its windows), thread
(the realtime and batch lanes that render chunks beside the model's steps).
"""
