//go:build race

package workflows

// raceDetector: the tests run under the race detector (go test -race).
const raceDetector = true
