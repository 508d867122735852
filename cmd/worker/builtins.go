package main

import "github.com/tempotrain/tempotrain/builtin"

// registerBuiltins registers the training functions this binary ships
// (builtin.Functions and gbdt), with this build's options (cuda.go,
// nocuda.go).
func registerBuiltins() error { return builtin.RegisterWith(builtinOptions()) }
