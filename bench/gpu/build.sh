#!/bin/sh
# Builds, on a machine without a GPU, everything bench/gpu/run.sh needs on the
# GPU machine (which has no Go toolchain), into bench/gpu/out (git-ignored;
# about 40 MB, under the device tool's 64 MiB):
#   cuda.test.xz  the -tags cuda tests of compute/cuda (go test -c)
#   gpubench.xz   this directory's command: the benchmark, and the whole-run
#                 checks (gpubench fit, gpubench python: an in-process
#                 Temporal server, the workflow worker and a GPU worker)
#   peer.py, run.sh, data/ (Fashion-MNIST's four IDX files, xz-compressed:
#   26 MB against gzip's 30, which the device tool's 64 MiB needs)
# (gpubench python takes the tempotrain package and the ResNet-18 script
# from the repository's python/, which travels with the working tree.)
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
go test -c -tags cuda -trimpath -ldflags='-s -w' -o "$out/cuda.test" ./compute/cuda
go build -tags cuda -trimpath -ldflags='-s -w' -o "$out/gpubench" ./bench/gpu
for b in cuda.test gpubench; do
	if ldd "$out/$b" | grep -q openblas; then
		echo "build.sh: $b links OpenBLAS dynamically" >&2
		exit 1
	fi
done
# The x86 filter and -9e: gpubench (the Temporal server inside) is 250 MB,
# 29 MB so compressed against 31 with plain -6; the working tree, this
# directory and the data must stay under the device tool's 64 MiB.
xz -T2 --x86 --lzma2=preset=9e,dict=64MiB -f "$out/cuda.test" "$out/gpubench"
cp bench/gpu/peer.py bench/gpu/run.sh "$out/"
# The IDX files as xz (run.sh makes .gz of them there, which peer.py and
# the script read); cached, since xz -9 of the training images takes a minute.
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tempotrain-gpu-data
mkdir -p "$cache"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
	if [ ! -s "$cache/$f.xz" ] || [ "$data/$f.gz" -nt "$cache/$f.xz" ]; then
		gunzip -c "$data/$f.gz" | xz -T2 -9 >"$cache/$f.xz.tmp" && mv "$cache/$f.xz.tmp" "$cache/$f.xz"
	fi
	cp "$cache/$f.xz" "$out/data/"
done
git rev-parse HEAD >"$out/commit"
du -sh "$out"
# What the device tool sends: the tracked files and this directory.
total=$(( $(git ls-files -z | xargs -0 stat -c %s | awk "{s+=\$1} END {print s}") + $(du -sb "$out" | cut -f1) ))
echo "working tree + $out: $total bytes (the device tool takes 67108864)"
[ "$total" -lt 67108864 ] || { echo "build.sh: too large for the device tool" >&2; exit 1; }
