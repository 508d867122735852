#!/bin/sh
# Builds, on a machine without a GPU, everything bench/gpu/run.sh needs on the
# GPU machine (which has no Go toolchain), into bench/gpu/out (git-ignored;
# about 40 MB, under the device tool's 64 MiB):
#   cuda.test.xz  the -tags cuda tests of compute/cuda (go test -c)
#   gpubench.xz   this directory's command
#   peer.py, run.sh, data/ (Fashion-MNIST's four IDX .gz files)
# OpenBLAS (the CPU backend's GEMM, linked by compute) is linked statically so
# that the binaries need nothing on the GPU machine but libc and the NVIDIA
# driver's libcuda.so.1; cuBLAS is found there at run time. xz shrinks each
# binary from ~32 MB to ~5 MB; run.sh unpacks them with Python's lzma.
# Needs: Go, nvidia-cuda-dev (cuda.h), libopenblas-dev, xz-utils and
# dataset-fashion-mnist (or DATA=dir).
set -eu
cd "$(dirname "$0")/../.."
out=bench/gpu/out
data=${DATA:-/usr/share/datasets/fashion-mnist}
export GOTOOLCHAIN=local
blas=$(mktemp -d)
trap 'rm -rf "$blas"' EXIT
ln -s /usr/lib/x86_64-linux-gnu/libopenblas.a "$blas/libopenblas.a"
# -L first: -lopenblas (compute/internal/kern's cgo flag) finds the archive.
export CGO_LDFLAGS="-L$blas -lpthread -lm"
rm -rf "$out"
mkdir -p "$out/data"
go test -c -tags cuda -o "$out/cuda.test" ./compute/cuda
go build -tags cuda -o "$out/gpubench" ./bench/gpu
for b in cuda.test gpubench; do
	if ldd "$out/$b" | grep -q openblas; then
		echo "build.sh: $b links OpenBLAS dynamically" >&2
		exit 1
	fi
done
xz -T2 -6 -f "$out/cuda.test" "$out/gpubench"
cp bench/gpu/peer.py bench/gpu/run.sh "$out/"
cp "$data"/train-images-idx3-ubyte.gz "$data"/train-labels-idx1-ubyte.gz \
	"$data"/t10k-images-idx3-ubyte.gz "$data"/t10k-labels-idx1-ubyte.gz "$out/data/"
git rev-parse HEAD >"$out/commit"
du -sh "$out"
