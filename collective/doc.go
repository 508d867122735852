// Package collective moves tensors between the ranks of one training attempt:
// ring all-reduce (sum, mean; float32, float64), broadcast from any root,
// all-gather of byte slices of any lengths, and a barrier, over plain TCP.
//
// # Contract
//
//   - Every rank calls Listen, publishes the listener's address, and calls
//     Connect with the addresses of all ranks (index = rank), the same Size,
//     SegmentBytes and Token. Connections presenting another token (a stray
//     process, a rank of a stale attempt), another world size, rank, protocol
//     version, byte order or segment size are refused with a reason.
//   - Operations are collective: all ranks call the same ones in the same
//     order with buffers of the same length (AllGather's may differ) and the
//     same root. Every frame carries the operation, its sequence number, the
//     total length and the root, so a disagreement fails with ErrMismatch
//     instead of corrupting data or hanging.
//   - Buffers are the caller's: reductions and broadcasts work in place, the
//     Comm keeps no reference after an operation returns and allocates
//     nothing in a steady-state AllReduce or Broadcast.
//   - Every operation has a deadline, the earlier of Options.Timeout (default
//     5m) after its start and ctx's deadline; ctx cancellation is honoured.
//     A dead peer, a silent peer or a cut connection makes the call return an
//     error naming this rank and the peer rank, never hang: a failing rank
//     closes its connections, so the failure travels round the ring in
//     milliseconds rather than each rank waiting for its own deadline.
//   - After any failed operation the Comm is unusable (the streams between
//     ranks are in an unknown state); later calls return the first error.
//     The runtime restarts the whole group with a new Comm and token.
//   - All ranks end an all-reduce with identical bits: each reduced element is
//     computed once, by one rank, and copied to the others.
//   - Close closes the connections and the listener and returns after every
//     goroutine of the Comm has exited. Abort cuts the connections with a TCP
//     reset, as a crash would (fault injection).
//
// Reducer adds PyTorch DDP's gradient buckets on top of a Comm: gradients are
// packed into buckets of ~25 MiB in reverse registration order and each
// bucket's mean all-reduce starts, in the background, as soon as its last
// gradient is ready, overlapping the rest of the backward pass.
//
// # Performance
//
// Over loopback on the project's 2-core VM the ring is bound by memory
// traffic: every byte crosses the kernel twice (copied into the sender's
// socket, out into the receiver's buffer), and memcpy there runs at 3.3 GB/s
// from DRAM, 5.5 GB/s for 1 MiB blocks and 42 GB/s within L2. A 64 MiB
// all-reduce of 2 ranks costs each rank about 30 ms of processor time, mostly
// in those copies (perf: 53% rep_movs in the kernel, 13% in the AVX2 add).
// Hence the defaults: 256 KiB segments and socket buffers, which keep the
// working set in L2. The add is AVX2 assembly on amd64 (7-9 GB/s on a 1 MiB
// segment against 1.2-3.9 GB/s for plain or unrolled Go; archsimd under
// GOEXPERIMENT=simd measured the same as the assembly, see reduce_simd_test.go).
// bench/allreduce compares with gloo and iperf3.
//
// The algorithms, one per file: ring.go (pipelined ring reduce-scatter and
// all-gather), broadcast.go (pipelined chain), allgather.go, connect.go
// (handshake), wire.go (the wire format and its version), reduce*.go (the
// reduction kernels), reducer.go (buckets).
package collective
