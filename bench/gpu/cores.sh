#!/bin/bash
# The 16-core measurements of issue 28 (item 4), on the GPU machine's CPUs,
# from binaries bench/gpu/build.sh cores made (bench/gpu/out-cores: allreduce,
# train): run from the repository root, after run.sh on the same warm machine
# (it takes Fashion-MNIST from bench/gpu/out/data, which run.sh unpacked), or
# with DATA=dir.
#   allreduce  bench/allreduce -netns (every rank a host: a network namespace)
#              at 4 ranks, 10 Gbit/s and unlimited veth, ours against gloo
#              with the hosts on CUBIC, when ip, tc and nft are there; else
#              on loopback at 4 and 8 ranks (said in the output)
#   train      bench/train at 8 ranks (one thread each) against PyTorch DDP
#              (gloo) at 8 processes, MLP and CNN
# Each part is bounded so that the whole ends within BUDGET seconds (200).
# $OUT gets cores.txt (everything printed) and cores-logs.tgz.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
art=$root/bench/gpu/out-cores
data=${DATA:-$root/bench/gpu/out/data}
res=/tmp/cores-results
out=${OUT:-$res}
budget=${BUDGET:-200}
t0=$SECONDS
rm -rf "$res" && mkdir -p "$res" "$out"
exec > >(tee "$out/cores.txt") 2>&1
left() { echo $((budget - (SECONDS - t0) - 10)); }
bounded() {
	local s=$1 l
	shift
	l=$(left)
	[ "$l" -lt "$s" ] && s=$l
	if [ "$s" -lt 15 ]; then
		echo "skipped (budget): $*"
		return 124
	fi
	timeout -k 5 "$s" "$@"
}
cd "$art" || exit 1
for f in *.xz; do
	[ -e "$f" ] || continue
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "${f%.xz}" &&
		chmod +x "${f%.xz}" && rm -f "$f"
done
cd "$root" || exit 1
echo "== $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); kernel $(uname -r); congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null); available $(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null)"
python3 -c 'import torch; print("torch", torch.__version__, "threads", torch.get_num_threads())'
tools=""
for t in ip tc nft iperf3; do command -v "$t" >/dev/null && tools="$tools $t"; done
echo "tools:${tools:- none of ip tc nft iperf3}"
status=0
if [[ " $tools " == *" ip "* && " $tools " == *" tc "* && " $tools " == *" nft "* ]]; then
	echo "== allreduce, 4 hosts (network namespaces), 10 Gbit/s and unlimited, CUBIC"
	iperf=false
	[[ " $tools " == *" iperf3 "* ]] && iperf=true
	ring=0
	$iperf && ring=2
	bounded 100 "$art/allreduce" -netns 10000,0 -netns-cc cubic -ranks 4 -sizes 16M,64M -rounds 3 -python python3 \
		-iperf=$iperf -ring-seconds $ring -floor=false 2>"$res/allreduce.err" || { status=1; tail -5 "$res/allreduce.err"; }
else
	echo "== allreduce on loopback (no network namespaces here: ip, tc and nft are needed), 4 and 8 ranks"
	bounded 80 "$art/allreduce" -ranks 4,8 -sizes 1M,16M,64M -rounds 3 -transports tcp,shm -python python3 -iperf=false \
		2>"$res/allreduce.err" || { status=1; tail -5 "$res/allreduce.err"; }
fi
echo "== train: 8 ranks, one thread each, against PyTorch DDP (gloo) at 8 processes"
bounded 150 "$art/train" -world 8 -models mlp,cnn -reps 3 -mlp-reps 3 -python python3 -data "$data" 2>"$res/train.err" ||
	{ status=1; tail -5 "$res/train.err"; }
echo "bench/gbdt: not run here: XGBoost is not installed on this machine (its package list has no xgboost)"
tar -C "$res" -czf "$out/cores-logs.tgz" . 2>/dev/null
echo "== done in $((SECONDS - t0))s, exit status $status"
exit $status
