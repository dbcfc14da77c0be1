"""Exceptions raised by nvfp4-aot.

Every error names what was wrong (the group, the field, the expected and the actual
value) and, where there is one, what to do next.
"""


class Nvfp4Error(Exception):
    """Base class of every error this package raises."""


class ArtifactError(Nvfp4Error):
    """The baked artifacts (manifest or cubins) are missing, corrupt or inconsistent."""


class CaptureError(Nvfp4Error):
    """The build step could not prove the launch ABI of a compiled kernel."""


class UnsupportedDeviceError(Nvfp4Error):
    """No baked kernel variant can run on the selected device."""


class InvalidProblemError(Nvfp4Error, ValueError):
    """Problem sizes or operands break a precondition of the kernels."""


class CudaError(Nvfp4Error):
    """A CUDA driver call failed; carries the operation and the CUresult name."""

    def __init__(self, operation: str, result_name: str, message: str = ""):
        self.operation = operation
        self.result_name = result_name
        detail = f": {message}" if message else ""
        super().__init__(f"{operation} failed with {result_name}{detail}")
