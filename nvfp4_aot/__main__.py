"""``python -m nvfp4_aot``: the same command line as ``nvfp4-aot``."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="nvfp4-aot")
