package main

import (
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// writeReports stores reports of a run the way a Fit does: 6 epochs, a
// restart after epoch 3 (attempt 2 resumes from checkpoint 3).
func writeReports(t *testing.T, dir, name string) {
	t.Helper()
	b, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []json.RawMessage
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for i := range 6 {
		e, attempt := i+1, 1
		if e > 3 {
			attempt = 2
		}
		rec := api.ReportRecord{Index: i, Attempt: attempt, Time: t0.Add(time.Duration(i) * time.Minute), Checkpoint: e,
			Metrics: api.Metrics{"epoch": float64(e), "train_loss": 1 / float64(e), "test_loss": 1.2 / float64(e),
				"test_accuracy": 1 - 0.5/float64(e), "samples_per_s": 1000}}
		l, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := storage.NewRun(b, name).AppendMetrics(context.Background(), 0, lines); err != nil {
		t.Fatal(err)
	}
}

// near says whether c is within 40 of want in each channel.
func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(x uint32, y uint8) bool { return math.Abs(float64(x>>8)-float64(y)) <= 40 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

// TestPlot: the PNG decodes, has both panels' curves in their colors
// (blue and orange losses, a blue accuracy) and the restart's red line;
// bad arguments say what is wrong.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	writeReports(t, dir, "curves")
	out := filepath.Join(t.TempDir(), "curves.png")
	if d := os.Getenv("TEMPOTRAIN_PLOT_OUT"); d != "" {
		out = d
	}
	if err := runPlot([]string{"-name", "curves", "-storage", dir, "-o", out}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s does not decode as PNG: %v", out, err)
	}
	bounds := img.Bounds()
	if bounds.Dx() < 600 || bounds.Dy() < 500 {
		t.Fatalf("image %v: want about 768x691", bounds)
	}
	// Count the curve colors in each half (the loss panel on top).
	count := func(r image.Rectangle, c color.RGBA) int {
		n := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if near(img.At(x, y), c) {
					n++
				}
			}
		}
		return n
	}
	top := image.Rect(0, 0, bounds.Dx(), bounds.Dy()/2)
	bottom := image.Rect(0, bounds.Dy()/2, bounds.Dx(), bounds.Dy())
	blue, orange := seriesColors[0], seriesColors[1]
	for _, c := range []struct {
		where string
		r     image.Rectangle
		col   color.RGBA
		min   int
	}{
		{"loss panel, test_loss (blue)", top, blue, 300},
		{"loss panel, train_loss (orange)", top, orange, 300},
		{"accuracy panel, test_accuracy (blue)", bottom, blue, 300},
		{"loss panel, restart (red)", top, restartColor, 50},
		{"accuracy panel, restart (red)", bottom, restartColor, 50},
	} {
		if n := count(c.r, c.col); n < c.min {
			t.Errorf("%s: %d pixels of its color, want >= %d", c.where, n, c.min)
		}
	}
	if n := count(bottom, orange); n > 20 {
		t.Errorf("the accuracy panel has %d orange pixels: it has one curve", n)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-name", "curves", "-storage", dir, "-o", out, "-metrics", "nope"}, `no report has "nope"`},
		{[]string{"-name", "missing", "-storage", dir, "-o", out}, `run "missing"`},
		{[]string{"-name", "curves", "-storage", dir, "-o", "x.svg"}, "PNG"},
		{[]string{"-storage", dir}, "-name and -storage are required"},
	} {
		err := runPlot(bad.args)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("plot %v: error %v, want one saying %q", bad.args, err, bad.want)
		}
	}
}
