// Package doccheck keeps the documentation true. Its tests read README.md,
// docs/*.md and the examples' READMEs and fail when:
//
//   - a relative link points at a file that does not exist, or at an
//     anchor that is no heading of its file;
//   - a repository path named in backticks (`cmd/worker/Dockerfile`) does
//     not exist;
//   - a command names a package that does not exist (`go run ./bench/x`),
//     a test that its package does not have (`go test ./app -run TestE2EX`),
//     or a flag that its command does not take (`starter fit -no-such`);
//   - README.md's test command is not what .ci/run runs;
//   - a code fence is never closed;
//   - a field of the Fit input (api.FitInput and its configs, by their JSON
//     names) lacks its row in docs/fit-input.md, or a flag of a starter
//     command or of cmd/worker lacks its row in docs/cli.md: both tables
//     are generated from the code, and
//     `go test ./internal/doccheck -run 'TestFitInputDoc|TestCLIDoc' -update`
//     rewrites them.
//
// The package holds the Markdown scanning its tests use; nothing imports it.
package doccheck
