"""nvfp4-aot: ahead-of-time compiled NVFP4 block-scaled grouped GEMM kernels.

The runtime needs only cuda-python and numpy; it never imports the CuTe DSL or torch.
``import nvfp4_aot`` is cheap: the runtime modules (and the CUDA bindings) load on first
use of a name below.

>>> import nvfp4_aot                                             # doctest: +SKIP
>>> nvfp4_aot.grouped_gemm(a, b, c, sfa, sfb, stream=stream)     # lists, one per group
>>> plan = nvfp4_aot.GroupedGemmPlan([(m, n, k), ...], device=0)
>>> plan.run(a, b, c, sfa, sfb, stream=stream)
"""

__version__ = "0.1.0"

_EXPORTS = {
    "GroupedGemmPlan": "plan",
    "get_plan": "plan",
    "grouped_gemm": "plan",
    "clear_plan_cache": "plan",
    "MoeGemmPlan": "moe",
    "QuantizePlan": "quantizer",
    "ArtifactError": "errors",
    "CudaError": "errors",
    "InvalidProblemError": "errors",
    "Nvfp4Error": "errors",
    "UnsupportedDeviceError": "errors",
    "artifacts_dir": "paths",
    "load_manifest": "loader",
}

__all__ = ["__version__", *_EXPORTS]

from .lazy import lazy_exports  # noqa: E402  (after the names it serves)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
