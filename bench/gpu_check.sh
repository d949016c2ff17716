#!/usr/bin/env bash
# The device check (bench/gpu_check.py), in two steps:
#
#   bench/gpu_check.sh prepare   # HERE (network): into runs/gpu_check/ (ignored by git): the wheels the device's
#                                # image lacks, for its Python 3.12 (pydantic, dp-accounting, dm-tree, ...), and
#                                # the raw Adult and Fashion-MNIST files from the local cache ($AMPFL_DATA or
#                                # ~/.cache/ampfl; run `ampfl data fetch adult fmnist` first if missing): ~40 MB
#   bench/gpu_check.sh run [ARGS]   # THERE, through the device tool, carrying runs/gpu_check:
#       run(command="bash bench/gpu_check.sh run --out $OUT", carry=["runs/gpu_check"], timeout_s=540)
#
# `run` installs the carried wheels into /tmp/ampfl-site (no network), points AMPFL_DATA at the carried data
# (the .npz caches are rebuilt there from the raw files) and runs bench/gpu_check.py with the image's python3.
# The defaults (K in {100, 1000}, 3 rounds, 2 interleaved pairs, hasircioglu-fig6 --quick) are sized to fit
# about 8 minutes; ARGS pass through (e.g. --ks 100 --reproduction '' for a shorter rerun).
set -euo pipefail
cd "$(dirname "$0")/.."
here=runs/gpu_check

case "${1:-}" in
prepare)
    mkdir -p "$here/wheels" "$here/data/adult" "$here/data/fmnist"
    .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$here/wheels" \
        pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
        typing-extensions==4.16.0 dp-accounting==0.6.0 dm-tree==0.1.9
    cache="${AMPFL_DATA:-$HOME/.cache/ampfl}"
    cp "$cache"/adult/adult.data "$cache"/adult/adult.test "$here/data/adult/"
    cp "$cache"/fmnist/*-ubyte.gz "$here/data/fmnist/"
    du -sh "$here"
    ;;
run)
    shift
    python3 -m pip install --quiet --no-index --no-deps --target /tmp/ampfl-site "$here"/wheels/*.whl
    export PYTHONPATH="$PWD/src:/tmp/ampfl-site" AMPFL_DATA="$PWD/$here/data" AMPFL_NO_NETWORK=1
    export PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    python3 bench/gpu_check.py "$@"
    ;;
*)
    echo "usage: bench/gpu_check.sh prepare | run [ARGS of bench/gpu_check.py]" >&2
    exit 2
    ;;
esac
