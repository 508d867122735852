#!/bin/bash
# The GPU checks and benchmarks of compute/cuda, in one call on the GPU
# machine (see README.md): unpack the binaries bench/gpu/build.sh made, run
# the -tags cuda tests (conformance on the device at FP32/TF32/BF16, GEMM
# precision, CUDA graphs, the built-in models against the CPU backend), then
# REPS repetitions of gpubench and the PyTorch peer, alternating which goes
# first, and print the report (medians, ratios ours/PyTorch). Logs and JSON
# go to $OUT (the device tool brings them back), else /tmp/gpu-results.
#   ONLY=tests or ONLY=bench runs one half; REPS (default 3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
art=${ART:-$here/out}
[ -f "$art/gpubench.xz" ] || [ -f "$art/gpubench" ] || art=$here # run.sh copied into out/
res=${OUT:-/tmp/gpu-results}
reps=${REPS:-3}
only=${ONLY:-}
mkdir -p "$res"
cd "$art" || exit 1
for f in *.xz; do
	[ -e "$f" ] || continue
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "${f%.xz}" &&
		chmod +x "${f%.xz}" && rm -f "$f"
done
export TEMPOTRAIN_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
echo "== commit $(cat commit 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$res/nvidia-smi.txt"
echo "== cuBLAS on this machine"
find / -name 'libcublas.so*' -not -path '/proc/*' 2>/dev/null | head -5

status=0
if [ "$only" != bench ]; then
	echo "== GPU checks: the -tags cuda tests of compute/cuda"
	./cuda.test -test.v -test.timeout 300s >"$res/cuda-test.log" 2>&1
	status=$?
	grep -E '^(--- |ok|FAIL|PASS)|^    --- |cuBLAS|GEMM .*relative|stats|GPU [0-9]' "$res/cuda-test.log" | grep -v -- '--- PASS: TestConformance/.*/' | tail -40
	echo "cuda.test exit status $status (full log: cuda-test.log)"
fi
if [ "$only" != tests ]; then
	echo "== benchmarks: $reps repetitions, tempotrain and PyTorch alternating"
	for r in $(seq "$reps"); do
		ours() { ./gpubench -data data -seed "$r" >>"$res/ours.jsonl" 2>>"$res/ours.err" || { echo "gpubench failed: $(tail -3 "$res/ours.err")"; status=1; }; }
		peer() { python3 peer.py --data data --seed "$r" >>"$res/peer.jsonl" 2>>"$res/peer.err" || { echo "peer.py failed: $(tail -3 "$res/peer.err")"; status=1; }; }
		if [ $((r % 2)) = 1 ]; then ours; peer; else peer; ours; fi
		echo "repetition $r done"
	done
	grep -h '"note"' "$res/ours.jsonl" | head -4
	./gpubench report "$res/ours.jsonl" "$res/peer.jsonl" | tee "$res/report.txt"
fi
exit $status
