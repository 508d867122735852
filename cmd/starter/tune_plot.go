package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/dashboard"
	"github.com/tempotrain/tempotrain/train"
)

// runTunePlot is `starter tune plot -name T`: every trial's curve of the
// search's metric on one figure, read from the trials' storage; a trial
// the scheduler stopped is dashed (and visibly shorter).
func runTunePlot(args []string) error {
	fs := flag.NewFlagSet("tune plot", flag.ExitOnError)
	var c conn
	c.flags(fs)
	searchID := searchFlags(fs)
	var (
		metric = fs.String("metric", "", "metric to draw (default: the search's)")
		out    = fs.String("o", "trials.png", "PNG file to write")
		width  = fs.Float64("width", 8, "width in inches")
	)
	_ = fs.Parse(args)
	id, err := searchID()
	if err != nil {
		return fmt.Errorf("tune plot: %w", err)
	}
	if filepath.Ext(*out) != ".png" {
		return fmt.Errorf("tune plot: -o %q: the output is a PNG; name it *.png", *out)
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	res, err := train.GetTuneResult(ctx, cl, id)
	if err != nil {
		return err
	}
	m := *metric
	if m == "" {
		m = res.Metric
	}
	curves := map[string][]api.ReportRecord{}
	for _, tr := range res.Trials {
		if tr.Iterations == 0 {
			continue
		}
		store, name := dashboard.TrialStorage(tr)
		recs, err := dashboard.LoadReports(ctx, store, name)
		if err != nil {
			return fmt.Errorf("tune plot: %s: %w", tr.Name, err)
		}
		curves[tr.Name] = recs
	}
	p, err := trialsPlot(res, curves, m)
	if err != nil {
		return err
	}
	w := vg.Length(*width) * vg.Inch
	if err := p.Save(w, w*0.6, *out); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s of %d trials of search %q\n", *out, m, len(curves), res.Name)
	return nil
}

// trialsPlot draws metric by epoch (by report without epochs) for each
// trial with reports: solid when it ran to its end, dashed when stopped,
// dotted when failed; the best trial first in the legend.
func trialsPlot(res *api.TuneResult, curves map[string][]api.ReportRecord, metric string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("search %s: %s (%s); dashed: stopped early", res.Name, metric, res.Mode)
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = metric
	p.Add(plotter.NewGrid())
	p.Legend.Top = res.Mode == "max"
	drawn := 0
	for k, tr := range res.Trials {
		var xys plotter.XYs
		_, xs, ys := dashboard.CurveOf(curves[tr.Name], metric)
		for i, x := range xs {
			xys = append(xys, plotter.XY{X: x, Y: ys[i]})
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("tune plot: %s: %w", tr.Name, err)
		}
		c := seriesColors[k%len(seriesColors)]
		l.Color, l.Width = c, vg.Points(1.5)
		switch tr.Status {
		case api.TrialStopped:
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		case api.TrialFailed:
			l.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
		}
		s.Color, s.Shape, s.Radius = c, draw.CircleGlyph{}, vg.Points(2)
		p.Add(l, s)
		if k < 10 {
			p.Legend.Add(tr.Name, l, s)
		}
		drawn++
	}
	if drawn == 0 {
		return nil, fmt.Errorf("tune plot: no trial of search %q reported %q", res.Name, metric)
	}
	return p, nil
}
