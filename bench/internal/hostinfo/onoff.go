package hostinfo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/tracing"
)

// OnOff prints a feature's on/off comparison of one measure over pairs of
// runs (on[i] beside off[i]): both medians, the ratio of the medians and
// the median of the pairs' ratios, which moves less with the machine's load.
func OnOff(what string, on, off []float64) {
	ratios := make([]float64, len(on))
	for i := range on {
		ratios[i] = on[i] / off[i]
	}
	mOn, mOff, mr := Median(on), Median(off), Median(ratios)
	fmt.Printf("%-14s median on %.0f, off %.0f; on/off: ratio of medians %.4f (%+.2f%%), median of pair ratios %.4f (%+.2f%%)\n",
		what+":", mOn, mOff, mOn/mOff, 100*(mOn/mOff-1), mr, 100*(mr-1))
	if lo, q1, q3, hi, ok := Spread(ratios); ok {
		fmt.Printf("%-14s pair ratios from %.4f to %.4f, the middle half %.4f to %.4f\n", "", lo, hi, q1, q3)
	}
}

// Spread is v's least and greatest values and the bounds of its middle
// half (the values at a quarter and three quarters of the sorted v, the
// nearest rank); ok is false for an empty v.
func Spread(v []float64) (lo, q1, q3, hi float64, ok bool) {
	if len(v) == 0 {
		return 0, 0, 0, 0, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	return s[0], s[n/4], s[(3*n-1)/4], s[n-1], true
}

// ReadRun reads a run's reports (its metrics.jsonl): the mean of their
// samples/s (tracing.SamplesMetric), the samples trained (samples/s ×
// epoch_time_s of each) and each report's samples/s.
func ReadRun(runPath string) (samplesPerSecond, samples float64, perReport []float64, err error) {
	f, err := os.Open(filepath.Join(runPath, "metrics.jsonl"))
	if err != nil {
		return 0, 0, nil, err
	}
	defer f.Close()
	var sum float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r api.ReportRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return 0, 0, nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if v, ok := r.Metrics[tracing.SamplesMetric]; ok {
			sum += v
			perReport = append(perReport, v)
			samples += v * r.Metrics["epoch_time_s"]
		}
	}
	if len(perReport) == 0 {
		return 0, 0, nil, fmt.Errorf("%s: no %s reported", f.Name(), tracing.SamplesMetric)
	}
	return sum / float64(len(perReport)), samples, perReport, sc.Err()
}
