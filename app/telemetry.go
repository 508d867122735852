package app

import (
	"go.opentelemetry.io/otel/attribute"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/tracing"
)

// ClientOptions returns o with tel's Temporal tracing interceptor (with a
// fit.attempt span over the ranks of each attempt) and SDK metrics handler
// added, for client.Dial; o as is when tel is off. Workers built on the
// client trace the Fit workflow and its activities.
func ClientOptions(o client.Options, tel *tracing.Telemetry) (client.Options, error) {
	return tel.ClientOptions(o, tracing.InterceptorOptions{AttemptOf: attemptOf, SecondaryErrorTypes: []string{api.ErrPeerLost.String()}})
}

// attemptOf groups the RunRank activities of a Fit by attempt.
func attemptOf(activityType string, args []any) (int, []attribute.KeyValue, bool) {
	if activityType != api.ActivityRunRank || len(args) == 0 {
		return 0, nil, false
	}
	in, ok := args[0].(api.RunRankInput)
	if !ok {
		return 0, nil, false
	}
	return in.Attempt, []attribute.KeyValue{tracing.AttrRun.String(in.RunName), tracing.AttrWorldSize.Int(in.WorldSize)}, true
}
