"""nvfp4-aot: ahead-of-time compiled NVFP4 block-scaled grouped GEMM kernels.

The runtime needs only cuda-python and numpy; it never imports the CuTe DSL or torch.
"""

__version__ = "0.1.0"
