package main

import "github.com/tempotrain/tempotrain/builtin"

// registerBuiltins registers the training functions this binary ships:
// mnist-mlp, mnist-cnn, mnist-resnet18.
func registerBuiltins() { builtin.Register() }
