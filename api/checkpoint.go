package api

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Metrics are the numbers a rank reports: loss, accuracy, samples/s...
type Metrics map[string]float64

// Checkpoint is a directory of files plus metadata (Ray's Checkpoint).
//
// A training function builds one with train.NewCheckpoint over a directory it
// wrote and passes it to train.Context.Report; rank 0's checkpoint is committed to the
// run's storage. Context.Checkpoint and Result return committed checkpoints:
// URI says where they live in storage, Dir (when set) is a local copy.
type Checkpoint struct {
	// Dir is a local directory holding the checkpoint's files. Set on a
	// checkpoint made by train.NewCheckpoint, or restored by the runtime.
	Dir string `json:"dir,omitempty"`
	// URI is where the committed checkpoint lives in storage
	// ("/runs/demo/checkpoint_000003" or "s3://bucket/runs/demo/checkpoint_000003").
	// Empty until committed.
	URI string `json:"uri,omitempty"`
	// Seq numbers the run's checkpoints from 1, across attempts.
	Seq int `json:"seq,omitempty"`
	// Attempt that wrote it.
	Attempt int `json:"attempt,omitempty"`
	// Metrics reported with it.
	Metrics Metrics `json:"metrics,omitempty"`
	// Meta is free-form metadata stored in the manifest (model kind, step...).
	Meta map[string]string `json:"meta,omitempty"`
	// Bytes is the total size of its files, once committed.
	Bytes int64 `json:"bytes,omitempty"`
	// Time it was committed.
	Time time.Time `json:"time,omitzero"`
}

// Path returns the local path of a file of the checkpoint.
func (c *Checkpoint) Path(name string) string {
	return filepath.Join(c.Dir, filepath.FromSlash(name))
}

// ReadFile reads one file of a local checkpoint.
func (c *Checkpoint) ReadFile(name string) ([]byte, error) {
	if c == nil || c.Dir == "" {
		return nil, fmt.Errorf("checkpoint has no local directory")
	}
	return os.ReadFile(c.Path(name))
}

func (c *Checkpoint) String() string {
	if c == nil {
		return "<no checkpoint>"
	}
	if c.URI != "" {
		return c.URI
	}
	return c.Dir
}
