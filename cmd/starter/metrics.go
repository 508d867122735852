package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/dashboard"
)

// runMetrics prints a run's reports (Ray's metrics_dataframe) from its
// storage: a table, or CSV with -csv. It reads storage only, so it works
// for runs whose workflow is long gone.
func runMetrics(args []string) error {
	fs := flag.NewFlagSet("metrics", flag.ExitOnError)
	name := fs.String("name", "", "run name (required)")
	store := fs.String("storage", os.Getenv("TEMPOTRAIN_STORAGE"), `storage path of the run: a directory or "s3://bucket/prefix" (env TEMPOTRAIN_STORAGE)`)
	asCSV := fs.Bool("csv", false, "CSV instead of a table")
	_ = fs.Parse(args)
	if *name == "" || *store == "" {
		return fmt.Errorf("metrics: -name and -storage are required")
	}
	recs, err := dashboard.LoadReports(context.Background(), *store, *name)
	if err != nil {
		return err
	}
	return writeMetrics(os.Stdout, recs, *asCSV)
}

// writeMetrics writes reports as a table or CSV: index, attempt, time,
// checkpoint, then every metric any report has, in name order.
func writeMetrics(w io.Writer, recs []api.ReportRecord, asCSV bool) error {
	names := dashboard.MetricNames(recs)
	header := append([]string{"index", "attempt", "time", "checkpoint"}, names...)
	rows := make([][]string, 0, len(recs))
	for _, r := range recs {
		row := []string{strconv.Itoa(r.Index), strconv.Itoa(r.Attempt), r.Time.UTC().Format(time.RFC3339Nano), ""}
		if r.Checkpoint > 0 {
			row[3] = strconv.Itoa(r.Checkpoint)
		}
		for _, k := range names {
			v, ok := r.Metrics[k]
			switch {
			case !ok:
				row = append(row, "")
			case asCSV:
				row = append(row, strconv.FormatFloat(v, 'g', -1, 64))
			default:
				row = append(row, strconv.FormatFloat(v, 'g', 6, 64))
			}
		}
		rows = append(rows, row)
	}
	if asCSV {
		cw := csv.NewWriter(w)
		_ = cw.Write(header)
		_ = cw.WriteAll(rows)
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	return tw.Flush()
}

// printResult prints a Result as a short table, or as JSON.
func printResult(w io.Writer, res *api.Result, asJSON bool) {
	if asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	status := "succeeded"
	switch {
	case res.Error != "":
		status = "failed: " + res.Error
	case res.StopReason != "":
		status = "stopped: " + res.StopReason
	}
	fmt.Fprintf(tw, "run\t%s\n", res.Name)
	fmt.Fprintf(tw, "status\t%s\n", status)
	fmt.Fprintf(tw, "attempts\t%d (failures %d), world sizes %v\n", res.Attempts, res.Failures, res.WorldSizes)
	fmt.Fprintf(tw, "reports\t%d\n", res.Reports)
	keys := make([]string, 0, len(res.Metrics))
	for k := range res.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%s\n", k, strconv.FormatFloat(res.Metrics[k], 'g', 6, 64))
	}
	if res.Checkpoint != nil {
		fmt.Fprintf(tw, "latest checkpoint\t%s\n", res.Checkpoint.URI)
	}
	if len(res.BestCheckpoints) > 0 && res.BestCheckpoints[0].URI != "" {
		fmt.Fprintf(tw, "best checkpoint\t%s\n", res.BestCheckpoints[0].URI)
	}
	if res.Promoted {
		fmt.Fprintf(tw, "promoted\tyes\n")
	}
	fmt.Fprintf(tw, "path\t%s\n", res.Path)
	_ = tw.Flush()
}
