// Package dashboard serves tempotrain's web dashboard and its JSON API
// over the sources the command line reads: Temporal's visibility (the runs
// and their Tempotrain* search attributes), a Fit's status Query and its
// pending ranks' heartbeats (train.StatusOf), and the run's storage
// (run.json, the reports of metrics.jsonl, the rank logs).
//
// The pages are plain HTML and JavaScript embedded in the binary, the
// charts uPlot (static/vendor/uplot, MIT): the dashboard works offline.
// Its routes are listed in docs/dashboard.md.
//
// The functions that read those sources (ListRuns, RunsQuery, FitInputOf,
// ScanReports) are the command line's too: `starter runs`, `metrics`,
// `plot` and `logs` call them.
package dashboard
