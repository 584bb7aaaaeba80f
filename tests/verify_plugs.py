"""Recognizers that tests install through SYNTH_VERIFY_RECOGNIZER (``tests.verify_plugs:Class``):
the real interface, built with no arguments as a deployment's recognizer is. Each writes a line
to the file SYNTH_TEST_RECOGNIZER_LOG names per transcript, so a test counts the checks that ran,
in whichever worker process ran them."""

from __future__ import annotations

import os
import time

from pipeline.verify.recognizer import PocketSphinx


def _log(line: str) -> None:
    with open(os.environ["SYNTH_TEST_RECOGNIZER_LOG"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


class Counted(PocketSphinx):
    """pocketsphinx, counted."""

    def transcribe(self, pcm: bytes) -> str:
        _log("transcribed")
        return super().transcribe(pcm)


class Stuck(PocketSphinx):
    """Starts a transcript and never ends it: a worker to kill mid-check."""

    def transcribe(self, pcm: bytes) -> str:
        _log("started")
        time.sleep(3600)
        return ""
