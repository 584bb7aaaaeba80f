"""The error tree. Callers decide retry-or-fail from the class, never from the message."""


class SynthError(Exception):
    """Base of every error synth raises on purpose."""


class PermanentError(SynthError):
    """Retrying will not help: the input or the configuration is wrong."""


class RetryableError(SynthError):
    """A passing fault (a service down, a worker lost): the job is retried with backoff."""


class InputError(PermanentError):
    """Bad user input: a corpus file, a line, an option."""


class UnknownVoiceError(InputError):
    pass


class UnknownFormatError(InputError):
    pass


class EngineError(PermanentError):
    """The engine could not render this text (nothing speakable, a token budget blown)."""


class EngineUnavailableError(PermanentError):
    """The engine's package or weights are missing on this machine."""


class ServiceUnavailableError(RetryableError):
    """Redis, the database or object storage could not be reached."""


class DatabaseUnavailableError(ServiceUnavailableError):
    """The database could not be reached: no job's outcome can be recorded, so the work is kept
    (its message retried for as long as the outage lasts) rather than given up."""


class StorageError(RetryableError):
    """An object could not be written or read."""


class IllegalTransitionError(PermanentError):
    """A job was asked to move between states the state machine forbids."""


class EngineOverloadedError(RetryableError):
    """The engine dropped work it could not hold (out of device memory); the job is run again."""


class MarkupError(InputError):
    """A ``<speak>`` document that is not well-formed, or an SSML value outside the subset."""
