#!/usr/bin/env bash
# Downloads into .whl/ (ignored by git) the wheels of the pure-Python packages that the GPU image
# lacks, for its Python 3.12 (it has jax, flax, optax, orbax, chex, transformers, torch, tokenizers,
# safetensors, pyarrow, absl-py, tqdm). Run it here, where pip reaches the package index, before
# a device run that carries `.whl`; benchmarks/device_suite.sh installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
for spec in ml-collections==1.1.0 math-verify==0.9.0 antlr4-python3-runtime==4.13.2 \
            latex2sympy2_extended==1.11.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
            referencing==0.37.0 rpds-py==2026.9.1 tensorboardX==2.6.5; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$spec"
done
ls .whl
