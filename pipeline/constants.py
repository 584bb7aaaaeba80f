"""Constants defined once."""

# Speech-rate estimate used for routing and token budgets: about 15 characters per second of speech.
CHARS_PER_SECOND = 15.0

# SNAC 24 kHz (the Orpheus codec): 7 LM tokens per coarse frame, 11.71875 coarse frames per second.
SNAC_SAMPLE_RATE = 24_000
SNAC_HOP = 512
SNAC_SAMPLES_PER_FRAME = 2048
SNAC_TOKENS_PER_FRAME = 7
SNAC_FRAMES_PER_SECOND = SNAC_SAMPLE_RATE / SNAC_SAMPLES_PER_FRAME  # 11.71875
LM_TOKENS_PER_AUDIO_SECOND = SNAC_TOKENS_PER_FRAME * SNAC_FRAMES_PER_SECOND  # 82.03125
