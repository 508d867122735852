// Package steplog reads the step logs that python/examples/fashion_resnet18/
// train.py writes with its step_log key (one file per rank, step_log.<rank>,
// a line "unix_time rank pid epoch step" after every step), so that a script
// run under torchrun and under tempotrain is timed by the same code.
package steplog

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rec is one line of a step log: the wall time a step ended.
type Rec struct {
	T           time.Time
	Rank, PID   int
	Epoch, Step int
}

// Read reads every rank's step log (base.<rank>), in time order. Lines that
// do not parse (a line being written) are skipped.
func Read(base string) []Rec {
	var recs []Rec
	files, _ := filepath.Glob(base + ".*")
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if r, ok := parse(sc.Text()); ok {
				recs = append(recs, r)
			}
		}
		fh.Close()
	}
	slices.SortFunc(recs, func(a, b Rec) int { return a.T.Compare(b.T) })
	return recs
}

func parse(line string) (Rec, bool) {
	fs := strings.Fields(line)
	if len(fs) != 5 {
		return Rec{}, false
	}
	ts, err := strconv.ParseFloat(fs[0], 64)
	if err != nil {
		return Rec{}, false
	}
	var n [4]int
	for i := range n {
		if n[i], err = strconv.Atoi(fs[i+1]); err != nil {
			return Rec{}, false
		}
	}
	return Rec{T: time.Unix(0, int64(ts*1e9)), Rank: n[0], PID: n[1], Epoch: n[2], Step: n[3]}, true
}

// SteadyRate is samples/s over rank 0's steps after the first skip ones:
// (steps after the skip-th) × globalBatch / their time. 0 when rank 0 ended
// no more than skip+1 steps.
func SteadyRate(recs []Rec, skip, globalBatch int) float64 {
	var r0 []Rec
	for _, r := range recs {
		if r.Rank == 0 {
			r0 = append(r0, r)
		}
	}
	if len(r0) <= skip+1 {
		return 0
	}
	a, b := r0[skip], r0[len(r0)-1]
	return float64((len(r0)-1-skip)*globalBatch) / b.T.Sub(a.T).Seconds()
}
