#!/bin/sh
# Builds, here, what bench/gpu/cores.sh runs on the GPU machine's 16 cores:
# bench/allreduce and bench/train, OpenBLAS linked statically, xz-compressed
# into bench/gpu/out-cores (about 14 MB; git-ignored). See README.md.
set -eu
cd "$(dirname "$0")/../.."
out=bench/gpu/out-cores
export GOTOOLCHAIN=local
blas=$(mktemp -d)
trap 'rm -rf "$blas"' EXIT
ln -s /usr/lib/x86_64-linux-gnu/libopenblas.a "$blas/libopenblas.a"
export CGO_LDFLAGS="-L$blas -lpthread -lm"
rm -rf "$out"
mkdir -p "$out"
for b in allreduce train; do
	go build -trimpath -ldflags='-s -w' -o "$out/$b" "./bench/$b"
	if ldd "$out/$b" | grep -q openblas; then
		echo "build-cores.sh: $b links OpenBLAS dynamically" >&2
		exit 1
	fi
done
xz -T2 --x86 --lzma2=preset=9e -f "$out/allreduce" "$out/train"
git rev-parse HEAD >"$out/commit"
du -sh "$out"
