package main

import (
	"sync"

	"github.com/tempotrain/tempotrain/builtin"
)

// registerBuiltins registers the training functions this binary ships
// (builtin.Functions and gbdt), with this build's options (cuda.go,
// nocuda.go), once: a test runs the command more than once in a process.
var registerBuiltins = sync.OnceValue(func() error { return builtin.RegisterWith(builtinOptions()) })
