// Package layout holds no code: its test checks that imports between the
// module's packages point one way, from the commands down to the run's data
// types (see ARCHITECTURE.md at the repository root, and the layers below):
//
//	cmd/*, bench/*, examples/*                  commands, benchmarks, runnable examples
//	internal/workerproc                         worker child processes (tests, benchmarks)
//	app                                         process assembly
//	workflows, activities                       the controller and the worker side
//	builtin, predict, train/trainrt             training functions, predictors, the runtime's side of train
//	train, gbdt                                 the user's API, boosted trees
//	compute, data                               models and kernels, datasets (shards, pipeline)
//	data/format                                 dataset readers (CSV, Parquet, images, IDX; no ranks)
//	collective, storage, tracing                ring, storage backends, telemetry
//	api, internal/freeport                      the run's plain data, ports (the leaves)
//
// A package may import packages of lower layers, and its own subpackages
// and parent (compute/cuda imports compute), unless a subpackage has a
// layer of its own (data/format, below data, may not import it); nothing
// else of the module. train/trainrt, besides, may be imported only by
// activities, app, cmd and bench (and python by app, cmd, bench and examples).
// A new package must be given a layer in
// layout_test.go before it can land.
// Test files may import upward (a conformance test of compute/cuda runs the
// built-in trainers); only non-test imports are checked.
package layout
