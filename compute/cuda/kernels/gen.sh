#!/bin/sh
# Regenerates kernels.ptx, the PTX of kernels.cu that compute/cuda embeds,
# compiled for compute_80 by the nvcc of Debian's nvidia-cuda-toolkit (11.8).
# One file serves every GPU of compute capability 8.0 or newer: the driver
# JIT-compiles the PTX for the GPU it loads on (sm_80 A100s, sm_90
# H100/H200, and later) when New loads it. kernels.cu uses nothing newer
# than sm_80 (no __CUDA_ARCH__ branches): a PTX for sm_90 differed in its
# .target line only. Run from anywhere: go generate ./compute/cuda
# (OUT=dir writes elsewhere, for CI's currency check).
set -eu
cd "$(dirname "$0")"
out=${OUT:-.}
nvcc -arch=sm_80 -ptx -O3 -std=c++14 -o "$out/kernels.ptx" kernels.cu
