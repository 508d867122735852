package api

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// MaxPointerBytes bounds a pointer file (promoted.json, last.json): a few
// hundred bytes in practice.
const MaxPointerBytes = 64 << 10

// maxPointerURI bounds the checkpoint URI a pointer names.
const maxPointerURI = 4096

// ParsePointer reads a pointer file's bytes, as predict.Load, BatchPredict
// and Promote do: at most MaxPointerBytes of one JSON object that names a
// checkpoint (a URI of at most 4096 bytes, no control characters) with a
// non-negative seq and a finite score. The error says which of these it is
// not.
func ParsePointer(b []byte) (Pointer, error) {
	var p Pointer
	if len(b) > MaxPointerBytes {
		return p, fmt.Errorf("a pointer file of %d bytes: at most %d", len(b), MaxPointerBytes)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return Pointer{}, fmt.Errorf("not a pointer file: %v", err)
	}
	switch {
	case p.Checkpoint == "":
		return Pointer{}, fmt.Errorf("the pointer names no checkpoint")
	case len(p.Checkpoint) > maxPointerURI:
		return Pointer{}, fmt.Errorf("the pointer's checkpoint URI has %d bytes: at most %d", len(p.Checkpoint), maxPointerURI)
	case strings.ContainsFunc(p.Checkpoint, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Pointer{}, fmt.Errorf("the pointer's checkpoint %q has control characters", p.Checkpoint)
	case p.Seq < 0:
		return Pointer{}, fmt.Errorf("the pointer's seq %d is negative", p.Seq)
	case p.Score != nil && (math.IsNaN(*p.Score) || math.IsInf(*p.Score, 0)):
		return Pointer{}, fmt.Errorf("the pointer's score %v is not finite", *p.Score)
	}
	return p, nil
}
