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


class SilentRenderError(EngineError):
    """The model ended a piece before its first audio frame. A sampled model does this now and
    then for a text it speaks well under another seed, so the renderer renders the piece again
    with one (SYNTH_RERENDER_BUDGET times) before it fails the job."""


class EngineUnavailableError(PermanentError):
    """The engine's package or weights are missing on this machine."""


class ServiceUnavailableError(RetryableError):
    """Redis, the database or object storage could not be reached."""


class OutageError(RetryableError):
    """Something every job needs is down: retried with backoff for as long as it lasts, spending
    no retry budget, since no job could succeed meanwhile and none is to blame."""


class DatabaseUnavailableError(ServiceUnavailableError, OutageError):
    """The database could not be reached: no job's outcome can be recorded, so the work is kept
    (its message retried for as long as the outage lasts) rather than given up."""


class StorageError(RetryableError):
    """An object could not be written or read."""


class StorageFullError(StorageError, OutageError):
    """The object store takes no writes: no space left, over quota, read-only or not permitted.
    An outage, waited out as the database's is (its retries spend no budget): the jobs render
    once space is freed, where failing them would lose the batch to a full disk. ``state`` is
    what health checks and heartbeats show: "storage full" or "storage unwritable"."""

    def __init__(self, message: str, *, state: str = "storage full") -> None:
        super().__init__(message)
        self.state = state


class IllegalTransitionError(PermanentError):
    """A job was asked to move between states the state machine forbids."""


class EngineOverloadedError(RetryableError):
    """The engine dropped work it could not hold (out of device memory); the job is run again."""


class MarkupError(InputError):
    """A ``<speak>`` document that is not well-formed, or an SSML value outside the subset."""


class QuotaExceededError(PermanentError):
    """A key's daily quota would be passed: refused until the UTC day turns (``retry_after`` s)."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
