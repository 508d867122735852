// Package storage keeps a run's state, metrics and checkpoints in a blob store:
// a local directory or S3 (any S3-compatible server such as MinIO).
//
// # Backends
//
// A Backend stores whole objects under slash-separated keys relative to its
// root. Put is atomic: an object appears whole or not at all (local: temp
// file, fsync, rename, fsync of the directory; S3: PutObject or a multipart
// upload that is completed only after every part is in). Open picks the
// backend from a storage path:
//
//	/abs/dir  file:///abs/dir   local directory
//	s3://bucket/prefix          S3, configured by the standard AWS chain
//
// S3 is configured like every AWS tool: credentials and region from the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
// AWS_PROFILE...), the shared config files, or the instance role; the endpoint
// from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (MinIO: "http://host:9000").
// TEMPOTRAIN_S3_PATH_STYLE=true|false forces path-style addressing
// (http://host/bucket/key); it defaults to true when a custom endpoint is set,
// because MinIO serves path-style unless it is given a domain. The region
// defaults to us-east-1 when the chain names none. AWS_MAX_ATTEMPTS overrides
// the retry budget (default 10 attempts, exponential backoff with jitter, on
// 5xx, throttling and connection errors). Objects above 16 MiB go up as
// multipart uploads, 4 parts in flight; a download stream that breaks is
// resumed with a ranged GET pinned to the object's ETag. Bodies are sent as
// UNSIGNED-PAYLOAD (see S3Config.SignPayload). Tests start a real MinIO with
// package storage/miniotest.
//
// Local storage creates files with mode 0666 and directories with 0777, less
// the umask, and writes only into real directories below its root: a
// symbolic link in place of a run or checkpoint directory (or of
// metrics.jsonl) is refused with ErrMisconfigured, so that whoever can
// create entries in the storage directory cannot redirect writes elsewhere.
// The root itself may be a link. Reads follow links.
//
// # Run layout
//
//	{run}/run.json                         run state (SaveState/LoadState)
//	{run}/metrics.jsonl                    one JSON line per report; line i is report i (local storage)
//	{run}/metrics.idx                      where each line of metrics.jsonl ends (local; for appends)
//	{run}/metrics/{last:012d}-{first:012d}.jsonl  reports first..last (S3, other backends)
//	{run}/checkpoint_{seq:06d}/...         the files of one checkpoint
//	{run}/checkpoint_{seq:06d}/manifest.json  written last: files, sizes, sha256 and CRC32C, metrics
//	{run}/logs/attempt-{n}/rank-{r}.log    what rank r logged in attempt n, as text lines (RankLog)
//
// Appending reports costs what the new reports cost, however many the run
// holds: local storage appends to metrics.jsonl in place, other backends
// write a segment object per append and merge small segments, 1000 reports
// to an object at most (see AppendMetrics). ReadMetrics and ScanMetrics read
// either layout, and runs written before segments existed.
//
// A checkpoint exists when, and only when, its manifest exists and parses:
// CommitCheckpoint writes every file first and the manifest last, so a commit
// cut at any point leaves nothing that ListCheckpoints returns. Restores check
// every file's size and CRC32C (sha256 for manifests without one) and fail
// with ErrCorrupt on a mismatch; a caller then falls back to an older
// checkpoint (RestoreLatest does).
// DeleteCheckpoint removes the manifest first, so a checkpoint being deleted
// disappears at once. Retention (which checkpoints to delete) is the caller's
// decision; the caller saves run.json before it deletes, so that run.json
// never names a checkpoint that is gone.
//
// A rank's log is written while the rank runs, by the rank alone
// (Run.RankLog): local storage appends each line to the file as it comes,
// other backends (S3 cannot append) keep the log in memory and upload it
// whole every few seconds when it changed, and at Close. Either way a log
// keeps its first Max bytes (DefaultRankLogMax) and ends with a line that
// says how many were dropped. Writing never fails or blocks the rank: a
// storage error is counted and logged once. ReadRankLog reads a log from an
// offset (what a follower has read), ListRankLogs lists the logs a run has.
//
// Each run has one writer at a time (the runtime's rank 0 and the workflow's
// bookkeeping activities, which never overlap). Concurrent readers are safe.
//
// # Asynchronous commits
//
// AsyncCommitter is Ray's asynchronous checkpoint upload: Submit snapshots a
// checkpoint directory locally and returns; the commit runs in the background.
// The next Submit (or Wait) waits for it and returns its manifest, or its
// error, so no upload failure is lost. A snapshot is hard links for a
// directory that is never written again (SnapshotLink, what the runtime uses
// for train.Context.NewCheckpointDir), else a copy into a host-memory buffer
// kept between reports (SnapshotCopy; files under the scratch directory for
// a checkpoint over SetStagingLimit). bench/storage, 256 MiB to a MinIO on
// loopback on a 2-core machine: the loop is blocked 0 ms per report with
// links and 46-94 ms with the memory copy, 92-100% of a 1.1-1.3 s upload
// hidden.
//
// # Reading checkpoints from anywhere
//
// OpenCheckpoint takes a checkpoint URI as Result reports it
// ("/runs/demo/checkpoint_000003", "s3://bucket/runs/demo/checkpoint_000003")
// and gives its manifest, one file as a verified stream, or the whole
// checkpoint downloaded to a directory, for a warm start or a predictor.
//
// # Errors
//
// Callers branch on three sentinels: ErrNotFound (no such object, run state or
// checkpoint), ErrCorrupt (a manifest, state or metrics file that does not
// parse, or a file whose size or checksum differs from its manifest), and
// ErrMisconfigured (a storage path that cannot work: unknown scheme, missing
// bucket, rejected credentials, permission denied, a symbolic link where
// local storage would write; retrying does not help).
package storage
