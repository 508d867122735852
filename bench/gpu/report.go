package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// report prints, for every measurement found in the JSON lines of files,
// the median of each side over repetitions and tempotrain's ratio to
// PyTorch (higher is better for tempotrain), with the test accuracies.
func report(files []string) error { return writeReport(os.Stdout, files) }

func writeReport(out io.Writer, files []string) error {
	type key struct{ kind, model, prec string }
	type val struct {
		speed, acc []float64
	}
	sides := map[key]map[string]*val{} // side: "pytorch", "graph", "eager"
	var keys []key
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var r Result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				f.Close()
				return fmt.Errorf("%s: %q: %w", name, line, err)
			}
			if r.Kind != "gemm" && r.Kind != "train" {
				continue // the whole-run lines: writeE2E
			}
			k := key{r.Kind, r.Model, r.Precision}
			if sides[k] == nil {
				sides[k] = map[string]*val{}
				keys = append(keys, k)
			}
			side := r.Side
			if side == "tempotrain" && r.Kind == "train" {
				side = map[bool]string{true: "graph", false: "eager"}[r.Graph]
			}
			v := sides[k][side]
			if v == nil {
				v = &val{}
				sides[k][side] = v
			}
			speed := r.TFLOPS
			if r.Kind == "train" {
				speed = r.Samples
			}
			v.speed = append(v.speed, speed)
			v.acc = append(v.acc, r.TestAcc)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.model != b.model {
			return a.model < b.model
		}
		return a.prec < b.prec
	})
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "measurement\tprecision\ttempotrain\tpytorch\tratio\ttest accuracy (ours / torch)\treps")
	for _, k := range keys {
		peer := sides[k]["pytorch"]
		what := "GEMM TFLOP/s"
		if k.kind == "train" {
			what = k.model + " samples/s"
		}
		for _, side := range []string{"tempotrain", "graph", "eager"} {
			v := sides[k][side]
			if v == nil {
				continue
			}
			label := what
			if side != "tempotrain" {
				label += " (" + side + ")"
			}
			num := "%.1f"
			if k.kind == "train" {
				num = "%.0f"
			}
			ours := median(v.speed)
			ratio, theirs, acc, n := "-", "-", "", len(v.speed)
			if peer != nil {
				theirs = fmt.Sprintf(num, median(peer.speed))
				ratio = fmt.Sprintf("%.2f", ours/median(peer.speed))
				if k.kind == "train" {
					acc = fmt.Sprintf("%.4f / %.4f", median(v.acc), median(peer.acc))
				}
				n = min(n, len(peer.speed))
			}
			fmt.Fprintf(w, "%s\t%s\t"+num+"\t%s\t%s\t%s\t%d\n", label, k.prec, ours, theirs, ratio, acc, n)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return writeE2E(out, files)
}

// writeE2E prints the whole-run lines of files (gpubench fit, gpubench
// python): each fit-e2e line, and the Python script's medians under
// torchrun and tempotrain with their ratio.
func writeE2E(out io.Writer, files []string) error {
	rates := map[string][]float64{}
	firsts := map[string][]float64{}
	var fits []E2E
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			var e E2E
			if !strings.HasPrefix(strings.TrimSpace(line), "{") || json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			switch e.Kind {
			case "fit-e2e":
				fits = append(fits, e)
			case "python":
				rates[e.Side] = append(rates[e.Side], e.Samples)
				firsts[e.Side] = append(firsts[e.Side], e.FirstS)
			}
		}
	}
	for _, e := range fits {
		fmt.Fprintf(out, "\nA Fit of %s: %d attempts, %d failures; GPU worker SIGKILLed after checkpoint %d, attempt 2 restored checkpoint %d and started %.1fs after the kill; test accuracy %.4f after %.0f epochs; %.1fs in all",
			e.Model, e.Attempts, e.Failures, e.KillAfterSeq, e.RestoredFrom, e.ResumeS, e.TestAcc, e.Epochs, e.Seconds)
		if e.Note != "" {
			fmt.Fprintf(out, " (FAILED: %s)", e.Note)
		}
		fmt.Fprintln(out)
	}
	if len(rates["torchrun"]) > 0 && len(rates["tempotrain"]) > 0 {
		tr, tt := median(rates["torchrun"]), median(rates["tempotrain"])
		fmt.Fprintf(out, "\nPython ResNet-18 script, one rank on the GPU (medians of %d/%d runs)\n", len(rates["torchrun"]), len(rates["tempotrain"]))
		fmt.Fprintf(out, "  samples/s   torchrun %.0f   tempotrain %.0f   ratio %.3f\n", tr, tt, tt/tr)
		fmt.Fprintf(out, "  first step  torchrun %.1fs   tempotrain %.1fs\n", median(firsts["torchrun"]), median(firsts["tempotrain"]))
	}
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
