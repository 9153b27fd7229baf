"""Errors a user sees as one line (the CLI prints ``spirula: error: <message>``)."""


class SpirulaError(Exception):
    """A problem the user can act on: bad input, a missing driver, no memory.

    The message is one line that names the file or object and what is wrong.
    ``exit_code`` is what the CLI exits with: 2, the user can fix it (the
    command line, the input, the environment: a driver, memory, disk space);
    1 only for :class:`InternalError` (and an uncaught exception, a bug).
    """

    exit_code = 2


class InternalError(SpirulaError):
    """Spirula (or the driver under it) computed something wrong, such as a
    kernel that differs from the reference in the selftest: nothing the user
    did or can change; exit 1."""

    exit_code = 1


class DatasetError(SpirulaError):
    """A dataset that cannot be read as given: a missing or malformed file, a
    camera that cannot be, a non-finite number. The message names the file
    (and the camera, frame or line); the CLI exits with 2 (bad input)."""

    exit_code = 2


class NoVulkanError(SpirulaError):
    """No Vulkan loader, or no device, or the device index does not exist."""

    exit_code = 2


class ShaderCompileError(SpirulaError):
    """glslangValidator rejected a shader: message names file, line and error."""

    exit_code = 2


class OutOfMemoryError(SpirulaError):
    """A GPU allocation failed; the message gives the sizes asked for and what
    to lower (exit 2)."""


class UsageError(SpirulaError):
    """Options or input that do not fit together or cannot be used (an odd
    size for a video, an unwritable output, an empty splat file); exit 2."""

    exit_code = 2


class DiskFullError(UsageError):
    """Too little free disk space for a file: before writing it (the space
    checked) or while writing it (``ENOSPC``, ``EDQUOT``); nothing half-written
    is left. ``path``: the file; ``needed``, ``free``: bytes, where known.
    Exit 2: freeing space (or another ``--output``) fixes it."""

    exit_code = 2

    def __init__(self, message: str, path=None, needed: int | None = None, free: int | None = None):
        super().__init__(message)
        self.path, self.needed, self.free = path, needed, free
