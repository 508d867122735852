package api

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// PythonFunc is the train_func of a run whose training function is Python
// (FitInput.Python): workers that allow Python register their Python runner
// under it. WithDefaults sets it when "python" is given without train_func.
const PythonFunc = "python"

// PythonSpec names a Python training function and what it runs with
// (FitInput.Python). Every rank starts Interpreter in WorkingDir with
// torch's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) and
// the repository's pure-Python tempotrain package on PYTHONPATH.
//
//	"python": {"entrypoint": "train.py:train_func", "working_dir": "s3://bucket/code/app.tar.gz"}
type PythonSpec struct {
	// Entrypoint is "file.py:func" or "package.module:func" (Ray's
	// train_loop_per_worker: func(config) is called with FitInput.Config),
	// or "file.py" alone: the script runs as __main__ with Args as argv, as
	// torchrun runs it. Paths are relative to the working directory.
	Entrypoint string `json:"entrypoint"`
	// Args are the script's sys.argv[1:] (script entrypoints only).
	Args []string `json:"args,omitempty"`
	// Interpreter is the Python executable. Default "python3".
	Interpreter string `json:"interpreter,omitempty"`
	// Env is added to the process's environment. The names the runtime
	// sets (RANK, WORLD_SIZE, MASTER_ADDR, ..., TEMPOTRAIN_*) are refused.
	Env map[string]string `json:"env,omitempty"`
	// WorkingDir is where the function runs: a directory present on every
	// worker ("/srv/app"), or a packed directory (a .tar.gz: an absolute
	// path, file:// or s3:// URI; `starter fit -working-dir .` packs and
	// uploads one) that each worker fetches, verifies and caches by digest.
	// Default: the worker's own directory.
	WorkingDir string `json:"working_dir,omitempty"`
	// WorkingDirSHA256 is the packed directory's sha256 (hex). When given,
	// a worker refuses an archive whose bytes do not match it.
	WorkingDirSHA256 string `json:"working_dir_sha256,omitempty"`
}

// Bounds of a PythonSpec: it travels in every rank's input.
const (
	MaxPythonEntrypoint = 1024
	MaxPythonArgs       = 256
	MaxPythonArgLen     = 4096
	MaxPythonEnv        = 256
	MaxPythonEnvLen     = 8192
)

// PythonReservedEnv are the environment variables a rank sets for its
// Python process; PythonSpec.Env may not set them.
var PythonReservedEnv = []string{
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
	"MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "PYTHONPATH",
}

var (
	pyIdent  = `[A-Za-z_][A-Za-z0-9_]*`
	pyModule = regexp.MustCompile(`^` + pyIdent + `(\.` + pyIdent + `)*$`)
	pyFunc   = regexp.MustCompile(`^` + pyIdent + `$`)
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	sha256re = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// SplitEntrypoint splits an entrypoint into its file or module and its
// function ("" for a script run as __main__).
func SplitEntrypoint(e string) (target, fn string) {
	if i := strings.LastIndexByte(e, ':'); i >= 0 {
		return e[:i], e[i+1:]
	}
	return e, ""
}

// IsScript reports whether the entrypoint's target is a .py file (else a
// module name).
func IsScript(target string) bool { return strings.HasSuffix(target, ".py") }

// IsPackedWorkingDir reports whether a working_dir names a packed directory
// (a .tar.gz) rather than a directory.
func IsPackedWorkingDir(w string) bool {
	return strings.HasSuffix(w, ".tar.gz") || strings.HasSuffix(w, ".tgz")
}

func (p *PythonSpec) validate() error {
	bad := func(field string, v any, reason string) error {
		return &InvalidInputError{Field: "python." + field, Value: v, Reason: reason}
	}
	e := p.Entrypoint
	target, fn := SplitEntrypoint(e)
	switch {
	case strings.TrimSpace(e) == "":
		return bad("entrypoint", e, `must name the function ("train.py:train_func", "pkg.module:train_func") or a script ("train.py")`)
	case len(e) > MaxPythonEntrypoint:
		return bad("entrypoint", e[:64]+"...", fmt.Sprintf("is %d bytes: at most %d", len(e), MaxPythonEntrypoint))
	case !printable(e):
		return bad("entrypoint", e, "holds a control character or invalid UTF-8")
	case strings.Contains(e, ":") && !pyFunc.MatchString(fn):
		return bad("entrypoint", e, fmt.Sprintf("function %q is not a Python identifier", fn))
	case IsScript(target) && (strings.HasPrefix(target, "/") || hasDotDot(target)):
		return bad("entrypoint", e, "the script must be a relative path inside the working directory (no leading '/', no '..')")
	case !IsScript(target) && !pyModule.MatchString(target):
		return bad("entrypoint", e, fmt.Sprintf("%q is neither a .py file nor a module name (pkg.module)", target))
	case !IsScript(target) && fn == "":
		return bad("entrypoint", e, `a module needs its function: "pkg.module:train_func" (a script runs as __main__: "train.py")`)
	case fn != "" && len(p.Args) > 0:
		return bad("args", p.Args, "are a script's argv: give them with a script entrypoint (\"train.py\"); a function gets the run's config")
	case len(p.Args) > MaxPythonArgs:
		return bad("args", fmt.Sprintf("%d args", len(p.Args)), fmt.Sprintf("at most %d", MaxPythonArgs))
	case len(p.Interpreter) > MaxPythonEntrypoint || !printable(p.Interpreter) || strings.TrimSpace(p.Interpreter) != p.Interpreter:
		return bad("interpreter", p.Interpreter, `must be an executable's name or path ("python3", "/opt/venv/bin/python")`)
	case len(p.Env) > MaxPythonEnv:
		return bad("env", fmt.Sprintf("%d variables", len(p.Env)), fmt.Sprintf("at most %d", MaxPythonEnv))
	case len(p.WorkingDir) > MaxPythonEntrypoint || !printable(p.WorkingDir):
		return bad("working_dir", p.WorkingDir, "holds a control character or is too long")
	case p.WorkingDir != "" && !strings.HasPrefix(p.WorkingDir, "/") && !validStoragePath(p.WorkingDir):
		return bad("working_dir", p.WorkingDir, `must be an absolute directory on every worker, or a packed directory (.tar.gz) at "/path", "file:///path" or "s3://bucket/key" (starter fit -working-dir packs a local one)`)
	case strings.HasPrefix(p.WorkingDir, "s3://") && !IsPackedWorkingDir(p.WorkingDir):
		return bad("working_dir", p.WorkingDir, "an S3 working_dir must be a packed directory (.tar.gz)")
	case p.WorkingDirSHA256 != "" && !sha256re.MatchString(p.WorkingDirSHA256):
		return bad("working_dir_sha256", p.WorkingDirSHA256, "must be 64 lowercase hex digits")
	case p.WorkingDirSHA256 != "" && !IsPackedWorkingDir(p.WorkingDir):
		return bad("working_dir_sha256", p.WorkingDirSHA256, "applies to a packed working_dir (.tar.gz)")
	}
	for i, a := range p.Args {
		if len(a) > MaxPythonArgLen || strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return bad(fmt.Sprintf("args[%d]", i), clip(a, 64), fmt.Sprintf("must be UTF-8 without NUL, at most %d bytes", MaxPythonArgLen))
		}
	}
	for k, v := range p.Env {
		switch {
		case !envName.MatchString(k):
			return bad("env", k, "is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
		case reservedEnv(k):
			return bad("env."+k, v, "is set by the runtime for each rank")
		case len(v) > MaxPythonEnvLen || strings.IndexByte(v, 0) >= 0:
			return bad("env."+k, clip(v, 64), fmt.Sprintf("must be without NUL, at most %d bytes", MaxPythonEnvLen))
		}
	}
	return nil
}

func reservedEnv(k string) bool {
	if strings.HasPrefix(k, "TEMPOTRAIN_") {
		return true
	}
	for _, r := range PythonReservedEnv {
		if k == r {
			return true
		}
	}
	return false
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
