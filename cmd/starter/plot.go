package main

import (
	"context"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/dashboard"
)

// seriesColors are the curves' colors, in metric name order within a
// panel; restartColor marks a restart.
var (
	seriesColors = []color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
		{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, // cyan
	}
	restartColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // red
)

// runPlot draws a run's learning curves from its storage into a PNG: a
// panel of losses and errors and a panel of accuracies and scores, per
// epoch (or per report when the reports carry no epoch), each restart a
// dashed red line.
func runPlot(args []string) error {
	fs := flag.NewFlagSet("plot", flag.ExitOnError)
	name := fs.String("name", "", "run name (required)")
	store := fs.String("storage", os.Getenv("TEMPOTRAIN_STORAGE"), `storage path of the run: a directory or "s3://bucket/prefix" (env TEMPOTRAIN_STORAGE)`)
	out := fs.String("o", "curves.png", "PNG file to write")
	metrics := fs.String("metrics", "", "comma-separated metrics to draw, in one panel (default: losses and accuracies, two panels)")
	width := fs.Float64("width", 8, "width in inches")
	_ = fs.Parse(args)
	if *name == "" || *store == "" {
		return fmt.Errorf("plot: -name and -storage are required")
	}
	if filepath.Ext(*out) != ".png" {
		return fmt.Errorf("plot: -o %q: the output is a PNG; name it *.png", *out)
	}
	recs, err := dashboard.LoadReports(context.Background(), *store, *name)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("plot: run %q in %s has no reports yet", *name, *store)
	}
	var want []string
	if *metrics != "" {
		want = strings.Split(*metrics, ",")
	}
	panels, err := curvePanels(recs, want)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(*out), ".plot-*.png")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	w := vg.Length(*width) * vg.Inch
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, w*0.45*vg.Length(len(panels))), vgimg.UseDPI(96))}
	dc := draw.New(c)
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p}
	}
	cv := plot.Align(rows, draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}, dc)
	for i, p := range panels {
		p.Draw(cv[i][0])
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil { // CreateTemp made it 0600
		return err
	}
	if err := os.Rename(f.Name(), *out); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d reports of run %q, %d panels\n", *out, len(recs), *name, len(panels))
	return nil
}

// panelOf says which default panel a metric belongs to: 0 losses and
// errors (lower is better), 1 accuracies and scores, -1 neither.
func panelOf(m string) int {
	m = strings.ToLower(m)
	for _, s := range []string{"loss", "rmse", "mae", "mse", "error"} {
		if strings.Contains(m, s) {
			return 0
		}
	}
	for _, s := range []string{"acc", "auc", "f1", "r2", "precision", "recall"} {
		if strings.Contains(m, s) {
			return 1
		}
	}
	return -1
}

// curvePanels builds the panels' plots.
func curvePanels(recs []api.ReportRecord, want []string) ([]*plot.Plot, error) {
	names := dashboard.MetricNames(recs)
	have := func(m string) bool { _, ok := slices.BinarySearch(names, m); return ok }
	var groups [][]string
	titles := []string{"loss", "accuracy"}
	if len(want) > 0 {
		for _, m := range want {
			if !have(m) {
				return nil, fmt.Errorf("plot: -metrics: no report has %q (metrics: %s)", m, strings.Join(names, ", "))
			}
		}
		groups, titles = [][]string{want}, []string{strings.Join(want, ", ")}
	} else {
		groups = make([][]string, 2)
		for _, m := range names {
			if k := panelOf(m); k >= 0 {
				groups[k] = append(groups[k], m)
			}
		}
		if len(groups[1]) == 0 {
			groups, titles = groups[:1], titles[:1]
		}
		if len(groups[0]) == 0 {
			groups, titles = groups[1:], titles[1:]
		}
		if len(groups) == 0 {
			return nil, fmt.Errorf("plot: no loss or accuracy among the metrics %s; name some with -metrics", strings.Join(names, ", "))
		}
	}
	xName, x := "report", func(i int, r api.ReportRecord) float64 { return float64(i) }
	for _, k := range []string{"epoch", "round"} {
		if have(k) {
			xName, x = k, func(i int, r api.ReportRecord) float64 {
				if v, ok := r.Metrics[k]; ok {
					return v
				}
				return float64(i)
			}
			break
		}
	}
	// A restart is the first report of an attempt after the first one.
	var restarts []float64
	for i, r := range recs {
		if i > 0 && r.Attempt != recs[i-1].Attempt {
			restarts = append(restarts, x(i, r)-0.5)
		}
	}
	var plots []*plot.Plot
	for g, ms := range groups {
		p := plot.New()
		p.Title.Text = titles[g]
		p.X.Label.Text = xName
		p.Add(plotter.NewGrid())
		p.Legend.Top = g == 0 // losses fall: the legend goes top right
		for j, m := range ms {
			var xys plotter.XYs
			for i, r := range recs {
				if v, ok := r.Metrics[m]; ok {
					xys = append(xys, plotter.XY{X: x(i, r), Y: v})
				}
			}
			l, s, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("plot: metric %s: %w", m, err)
			}
			c := seriesColors[j%len(seriesColors)]
			l.Color, l.Width = c, vg.Points(2)
			s.Color, s.Shape, s.Radius = c, draw.CircleGlyph{}, vg.Points(2.5)
			p.Add(l, s)
			p.Legend.Add(m, l, s)
		}
		if len(restarts) > 0 {
			ymin, ymax := p.Y.Min, p.Y.Max
			for k, rx := range restarts {
				l, err := plotter.NewLine(plotter.XYs{{X: rx, Y: ymin}, {X: rx, Y: ymax}})
				if err != nil {
					return nil, err
				}
				l.Color, l.Width, l.Dashes = restartColor, vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(3)}
				p.Add(l)
				if k == 0 {
					p.Legend.Add("restart", l)
				}
			}
		}
		plots = append(plots, p)
	}
	return plots, nil
}
