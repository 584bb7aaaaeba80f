"""Engines turn text into audio. One folder per engine; import them through ``registry``."""
