"""Build side: compile CuTe DSL kernels, capture their exact launch ABI, write artifacts.

Only :mod:`nvfp4_aot.bake.compile_one` imports the DSL, and it runs in a child process
per variant; everything else here needs only the standard library, numpy and gcc.
"""
