#!/bin/sh
# Regenerates the PTX of kernels.cu that compute/cuda embeds: one file per
# target (sm_80 for A100-class GPUs, sm_90 for H100/H200), compiled by the
# nvcc of Debian's nvidia-cuda-toolkit (11.8); the driver compiles the PTX for
# the GPU at load time. Run from anywhere: go generate ./compute/cuda
# (OUT=dir writes elsewhere, for CI's currency check).
set -eu
cd "$(dirname "$0")"
out=${OUT:-.}
for sm in 80 90; do
	nvcc -arch=sm_$sm -ptx -O3 -std=c++14 -o "$out/kernels_sm$sm.ptx" kernels.cu
done
