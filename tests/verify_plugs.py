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
    """Starts a transcript and never ends it: a worker to kill mid-check. It logs the niceness of
    the process it runs in."""

    def transcribe(self, pcm: bytes) -> str:
        _log(f"started at nice {os.nice(0)}")
        time.sleep(3600)
        return ""


class DeafFirst(Counted):
    """Hears nothing in the first audio it is given, then hears as pocketsphinx does: the first
    render of a job is judged bad (says other words), its retake on its merits."""

    def transcribe(self, pcm: bytes) -> str:
        log = os.environ["SYNTH_TEST_RECOGNIZER_LOG"]
        if not os.path.exists(log):
            _log("deaf")
            return ""
        return super().transcribe(pcm)


class Deaf(Counted):
    """Hears nothing, ever: every render of a job is bad."""

    def transcribe(self, pcm: bytes) -> str:
        _log("deaf")
        return ""
