package main

import (
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/python"
)

// registerBuiltins registers the training functions this binary ships:
// mnist-mlp, mnist-cnn, mnist-resnet18, and the Python runner (api.PythonFunc):
// `starter dev` is one person's machine, where running the Python code its
// user names is the point.
func registerBuiltins() {
	builtin.Register()
	if err := python.Register(python.Options{}); err != nil {
		panic(err)
	}
}
