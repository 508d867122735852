#!/bin/bash
# The GPU checks and benchmarks, in one call on the GPU machine (see
# README.md): unpack what bench/gpu/build.sh made, then, each part bounded so
# that the whole ends within BUDGET seconds (default 520):
#   tests   the -tags cuda tests of compute/cuda (conformance on the device
#           at FP32/TF32/BF16, GEMM precision, CUDA graphs, the built-in
#           models against the CPU backend)
#   bench   REPS repetitions (default 2) of gpubench and the PyTorch peer,
#           alternating which goes first (last: the budget bounds it)
#   fit     gpubench fit: a use_gpu Fit of mnist-cnn, its GPU worker
#           SIGKILLed after the first checkpoint, a second worker finishing
#   python  gpubench python: the ResNet-18 script, one rank on the GPU, under
#           torchrun and as a Python Fit, alternating, PY_N runs each
# and print the report (medians, ratios ours/PyTorch). ONLY=tests,fit (a
# comma list) runs some parts; TESTS_S, OURS_S, PEER_S, FIT_S and PY_S bound
# each part (seconds; the budget bounds them all). $OUT (the device tool brings it back, at most
# 8 files) gets report.txt, summary.txt, nvidia-smi.txt and logs.tgz (every
# log and JSON line); without $OUT they stay in /tmp/gpu-results.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
art=${ART:-$here/out}
[ -f "$art/gpubench.xz" ] || [ -f "$art/gpubench" ] || art=$here # run.sh copied into out/
res=/tmp/gpu-results
out=${OUT:-$res}
reps=${REPS:-2}
only=${ONLY:-tests,bench,fit,python}
budget=${BUDGET:-520}
t0=$SECONDS
rm -rf "$res" && mkdir -p "$res" "$out"
cd "$art" || exit 1
want() { [[ ",$only," == *",$1,"* ]]; }
# left: seconds of the budget left, less a reserve for the report and packing.
left() { echo $((budget - (SECONDS - t0) - 15)); }
# bounded SECS CMD...: CMD under timeout, at most SECS and what the budget leaves.
bounded() {
	local s=$1 l
	shift
	l=$(left)
	[ "$l" -lt "$s" ] && s=$l
	if [ "$s" -lt 20 ]; then
		echo "skipped (budget): $*" | tee -a "$res/summary.txt"
		return 124
	fi
	timeout -k 5 "$s" "$@"
}
unxz() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
for f in *.xz; do
	[ -e "$f" ] || continue
	unxz "$f" "${f%.xz}" && chmod +x "${f%.xz}" && rm -f "$f"
done
for f in data/*.xz; do
	[ -e "$f" ] || continue
	unxz "$f" "${f%.xz}" && rm -f "$f"
done
export TEMPOTRAIN_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
{
	echo "== commit $(cat commit 2>/dev/null); $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
	python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
	echo "cuBLAS: $(find / -name 'libcublas.so*' -not -path '/proc/*' 2>/dev/null | head -3 | tr '\n' ' ')"
} 2>&1 | tee "$out/nvidia-smi.txt"

status=0
fail() { echo "FAILED: $*" | tee -a "$res/summary.txt"; status=1; }
bench_rep() {
	local r=$1
	ours() { bounded "${OURS_S:-150}" ./gpubench -data data -seed "$r" >>"$res/ours.jsonl" 2>>"$res/ours.err" || fail "gpubench rep $r: $(tail -3 "$res/ours.err")"; }
	peer() { bounded "${PEER_S:-120}" python3 peer.py --data data --seed "$r" >>"$res/peer.jsonl" 2>>"$res/peer.err" || fail "peer.py rep $r: $(tail -3 "$res/peer.err")"; }
	if [ $((r % 2)) = 1 ]; then ours; peer; else peer; ours; fi
	echo "== benchmark repetition $r done at $((SECONDS - t0))s"
}

if want tests; then
	echo "== GPU checks: the -tags cuda tests of compute/cuda"
	bounded "${TESTS_S:-180}" ./cuda.test -test.v -test.timeout "$((${TESTS_S:-180} - 10))s" >"$res/cuda-test.log" 2>&1
	rc=$?
	grep -E '^(--- |ok|FAIL|PASS|panic)|^    --- |cuBLAS|GEMM .*relative|stats|GPU [0-9]' "$res/cuda-test.log" | grep -v -- '--- PASS: TestConformance/.*/' | tail -40
	[ $rc = 0 ] || fail "cuda.test exit status $rc: $(grep -E '^(--- FAIL|panic)' "$res/cuda-test.log" | head -5 | tr '\n' ' ')"
	echo "cuda.test exit status $rc at $((SECONDS - t0))s"
fi
if want fit; then
	echo "== a use_gpu Fit, its GPU worker SIGKILLed after checkpoint 1"
	bounded "${FIT_S:-150}" ./gpubench fit -data data -epochs 4 -timeout "$((${FIT_S:-150} - 15))s" >>"$res/e2e.jsonl" 2>"$res/fit.err" || fail "gpubench fit: $(tail -c 1500 "$res/fit.err")"
	echo "fit done at $((SECONDS - t0))s"
fi
if want python; then
	echo "== the Python ResNet-18 script on the GPU: torchrun and tempotrain"
	py=$(cd "$here/../../python" 2>/dev/null && pwd) || py=$art/python
	bounded "${PY_S:-200}" ./gpubench python -data data -script "$py/examples/fashion_resnet18/train.py" -pythonpath "$py" \
		-n "${PY_N:-2}" >>"$res/e2e.jsonl" 2>"$res/python.err" || fail "gpubench python: $(tail -c 1500 "$res/python.err")"
	echo "python done at $((SECONDS - t0))s"
fi
if want bench; then
	for r in $(seq 1 "$reps"); do bench_rep "$r"; done
	grep -h '"note"' "$res/ours.jsonl" | head -4
fi
files=()
for f in ours peer e2e; do [ -f "$res/$f.jsonl" ] && files+=("$res/$f.jsonl"); done
[ ${#files[@]} -gt 0 ] && ./gpubench report "${files[@]}" 2>&1 | tee "$out/report.txt"
[ -f "$res/summary.txt" ] && cp "$res/summary.txt" "$out/"
[ "$out" = "$res" ] || tar -C "$res" -czf "$out/logs.tgz" . 2>/dev/null
echo "== done in $((SECONDS - t0))s, exit status $status"
exit $status
