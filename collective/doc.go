// Package collective moves tensors between the ranks of one training attempt:
// all-reduce (sum, mean; float32, float64) round a ring, broadcast from any
// root, all-gather of byte slices of any lengths, and a barrier (small ones
// of 4 ranks or more along a line, line.go), over TCP, or, for ranks on the
// same host, over shared memory.
//
// # Contract
//
//   - Every rank calls Listen, publishes the listener's address, and calls
//     Connect with the addresses of all ranks (index = rank), the same Size,
//     SegmentBytes and Token. The two ends of a connection prove to each
//     other that they hold the token without sending it (connect.go);
//     connections that cannot (a stray process, a rank of a stale attempt,
//     a replayed handshake) or that give another world size, rank, protocol
//     version, byte order or segment size are refused with a reason. A
//     connection that says nothing cannot hold up the group: handshakes run
//     side by side, a connection that has not sent its whole first flight
//     (hello and proof of the token) 2 s after it was accepted is dropped,
//     and the slots of such connections are shared out per source address,
//     the left neighbour's own address keeping half, so strangers
//     reconnecting in a loop, even from the neighbour's host, cannot keep
//     the neighbour out. How a link runs (shared memory, TLS) is under the
//     handshake's MAC: a relay cannot turn TLS off, and a rank that asked
//     for TLS refuses a link without it.
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
//     goroutine of the Comm has exited; shared memory is unmapped once the
//     operation in flight, if any, has returned. Abort cuts the connections
//     with a TCP reset, as a crash would (fault injection); an aborted Comm
//     is still closed.
//   - Transports (Options.Transport): each rank's link to its right
//     neighbour is TCP, or, when both ends run on the same host (same boot id
//     and host name) and can map a shared file, shared memory, as NCCL's SHM
//     transport (shm.go): the data goes through a ring of slots in a
//     /dev/shm file both map (its name is gone as soon as both have mapped
//     it), and the TCP connection stays, carrying doorbells and telling a
//     rank when its neighbour is gone, so tokens, deadlines, cancellation,
//     Abort and peer death behave alike on both. TransportAuto, the default,
//     picks per link; TransportTCP never uses shared memory, nor does
//     TransportAuto when the environment has TEMPOTRAIN_COLLECTIVE_SHM=0;
//     TransportSHM fails Connect rather than fall back. Both transports run
//     the same schedule and kernels: results are bit-identical. Comm.Links
//     says what each link got.
//   - TCP links (Options.Congestion, DefaultTCPSocketBuffer): CUBIC, set on
//     the dialing socket before it connects, where the kernel's default may
//     be BBR, whose timer pacing costs a third more processor time per byte
//     on links without fq (TEMPOTRAIN_COLLECTIVE_CONGESTION=system keeps the
//     kernel's; Comm.Congestion says what a link got); a group linked by TCP
//     only takes 2 MiB segments and 512 KiB socket buffers.
//   - Shared buffers (shared.go): AllocShared, a collective call, gives each
//     rank a buffer that every rank of the group can reach, as NCCL's
//     registered buffers. An all-reduce of at least 64 KiB whose buffers lie
//     in shared buffers on every rank skips the ring: after an exchange of
//     where the buffers are, each rank reduces its own chunk straight out of
//     all ranks' buffers and writes the result into all of them, then a
//     barrier. The bits are the ring's (same chunks, same order of
//     additions); deadlines, cancellation and peer death behave as the
//     ring's. Where the group cannot share memory (another host, a TCP link,
//     a full /dev/shm, not Linux) every rank gets ordinary memory and the
//     ring runs. The runtime puts CPU models' gradient arenas there
//     (builtin), so DDP's buckets run this way.
//   - Options.Observer sees every operation, with its context, size, timing,
//     error and whether an all-reduce ran the direct algorithm (tracing and
//     metrics hang off it).
//
// Reducer adds PyTorch DDP's gradient buckets on top of a Comm: gradients are
// packed into buckets of ~25 MiB in reverse registration order and each
// bucket's mean all-reduce starts, in the background, as soon as its last
// gradient is ready, overlapping the rest of the backward pass. Gradients
// that are adjacent slices of one array (a model's gradient arena) are
// reduced in place, without packing copies (DDP's gradient_as_bucket_view).
//
// # Performance
//
// Over loopback TCP on the project's 2-core VM the ring is bound by memory
// traffic: every byte crosses the kernel twice (copied into the sender's
// socket, out into the receiver's buffer), and memcpy there runs at 3.4 GB/s
// from DRAM (for the whole machine: two threads copy no faster than one),
// 5.5 GB/s for 1 MiB blocks and 42 GB/s within L2. A 64 MiB all-reduce of 2
// ranks costs each rank about 30 ms of processor time over TCP, mostly in
// those copies (perf: 53% rep_movs in the kernel, 13% in the AVX2 add).
// Hence the defaults: 256 KiB segments and socket buffers, which keep the
// working set in L2. The add is AVX2 assembly on amd64 (7-9 GB/s on a 1 MiB
// segment against 1.2-3.9 GB/s for plain or unrolled Go; archsimd under
// GOEXPERIMENT=simd measured the same as the assembly, see reduce_simd_test.go).
//
// Shared memory removes the kernel's copies: the sender copies a segment into
// a slot, the receiver reduces straight out of it, and where the next slot is
// free it writes its result there for the next rank (ring.go's frame groups
// keep that slot near), so forwarding costs no copy; a rank whose links are
// both shared memory drives them from one goroutine. A 64 MiB all-reduce of 2
// ranks then costs each rank about 19 ms of processor time, nearly all of it
// reading and writing the caller's buffer, and takes as long as 2 threads
// reading and writing 64 MiB each once (the memory floor bench/allreduce
// measures: this VM's threads share about 8-10 GB/s of memory bandwidth).
// bench/allreduce -full -rounds 7, medians, same-run ratios, shared machine:
//
//	64 MiB x 2 ranks: shm 23.9 ms (3.00x gloo, 64% of iperf3's busbw),
//	                  tcp 51.6 ms (1.39x gloo, 30%), memory floor 26.7 ms
//	64 MiB x 4 ranks: shm 75.0 ms (1.92x gloo), tcp 149.0 ms (0.97x),
//	                  memory floor 43.6 ms; rank 0 spends 35 ms of CPU per
//	                  shm all-reduce, so 4 ranks on 2 cores are CPU-bound
//	4 KiB x 2 ranks:  shm 53 µs, tcp 71 µs, gloo 1377 µs
//
// With 4 ranks on 2 processors the ring over shared memory is bound by the
// processors: each segment goes through a slot and back, about twice the
// memory traffic of the floor. Shared buffers (shared.go) remove the slots:
// each rank reads its chunk of every buffer once and writes it once, with no
// waiting between ranks. bench/allreduce -full -rounds 7 (another run, the
// machine less loaded):
//
//	64 MiB x 2 ranks: shared 9.0 ms (6.04x gloo), shm 17.1 ms (3.16x), tcp 41.0 ms (1.32x)
//	64 MiB x 4 ranks: shared 19.6 ms (5.82x), shm 56.7 ms (2.01x), tcp 108.7 ms (1.05x)
//	64 MiB x 8 ranks: shared 47.4 ms (5.62x), shm 156.5 ms (1.70x), tcp 288.4 ms (0.92x)
//
// Shared-memory numbers hold for ranks on one host (as NCCL's SHM
// transport); TCP numbers are over loopback.
//
// Small operations of groups of 4 ranks or more (an all-reduce of up to
// 16 KiB, an all-gather of up to one segment in all, a barrier) take the
// line instead of the ring (line.go): the buffer gathers from rank 0 to the
// last rank and spreads back round the ring, at most 2 frames a rank each
// way instead of the ring's 2(size-1), at the same hops. On this machine
// (bench_test.go BenchmarkSmallAllReduce, 64 bytes, all ranks in one process)
// 256 ranks took 19.6 ms instead of 367 ms, 4 ranks 94 µs instead of 162 µs.
//
// The algorithms, one per file: ring.go (pipelined ring reduce-scatter and
// all-gather), line.go (small operations of large groups), broadcast.go
// (pipelined chain), allgather.go, connect.go
// (handshake and transport negotiation), wire.go (the wire format and its
// version), shm.go (shared-memory links; shm_linux.go maps the regions),
// transport.go (Transport), reduce*.go (the reduction kernels), reducer.go
// (buckets), shared.go (shared buffers and the direct all-reduce).
package collective
